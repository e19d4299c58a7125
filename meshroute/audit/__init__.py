"""
The mesh audit: a PySpark job that reads every router's event log and
says what the mesh did with each message and each link.

C{meshroute audit EVENTS... --out DIR} (L{meshroute.audit.job}, and with
C{--follow} the streaming audit, L{meshroute.audit.follow}); the schema it
reads with is L{meshroute.audit.schema}, the computations are
L{meshroute.audit.views}, the tables both audits write
L{meshroute.audit.tables}, the outputs L{meshroute.audit.report}; both
start and end a run alike (L{meshroute.audit.running}) from its
L{meshroute.audit.settings}.  PySpark
is the C{audit} extra (C{pip install 'meshroute[audit]'}); importing
this package does not need it.
"""
