"""
The mesh audit: a PySpark job that reads every router's event log and
says what the mesh did with each message, each topic publication's
copies and each link.

C{meshroute audit EVENTS... --out DIR} (L{meshroute.audit.job}, and with
C{--follow} the streaming audit, L{meshroute.audit.follow}, whose state
is L{meshroute.audit.state}, L{meshroute.audit.incremental} and
L{meshroute.audit.topic_state}); the schema it reads with is
L{meshroute.audit.schema}, the computations are L{meshroute.audit.views}
and, for topics, L{meshroute.audit.topic_views}, the tables both audits
write L{meshroute.audit.tables}, the outputs L{meshroute.audit.report}
(and L{meshroute.audit.topic_report}); both
start and end a run alike (L{meshroute.audit.running}) from its
L{meshroute.audit.settings}.  PySpark
is the C{audit} extra (C{pip install 'meshroute[audit]'}); importing
this package does not need it.
"""
