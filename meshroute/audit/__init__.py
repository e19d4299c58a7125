"""
The mesh audit: a PySpark job that reads every router's event log and
says what the mesh did with each message and each link.

C{meshroute audit EVENTS... --out DIR} (L{meshroute.audit.job}); the
schema it reads with is L{meshroute.audit.schema}, the computations are
L{meshroute.audit.views}, the outputs L{meshroute.audit.report}.  PySpark
is the C{audit} extra (C{pip install 'meshroute[audit]'}); importing
this package does not need it.
"""
