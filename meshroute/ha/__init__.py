"""
High availability: primary/backup pairs, quorum-guarded epochs, leases.

This package holds the pure core of HA (docs/ha.md, "Status"): the
voting rules (L{meshroute.ha.quorum}), the candidate's election
(L{meshroute.ha.election}), the active's lease (L{meshroute.ha.lease}),
the role of one instance (L{meshroute.ha.role}) and the settings with
their validation (L{meshroute.ha.settings}).  Of these only the voter is
wired into the router: L{meshroute.ha.witness} answers votes and
heartbeats on the routing listener from durable records.
"""
