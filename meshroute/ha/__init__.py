"""
High availability: primary/backup pairs, quorum-guarded epochs, leases.

One instance of a pair is an L{meshroute.ha.instance.HAInstance}
(built by L{meshroute.ha.build}), which twistd runs for a configuration
with C{[ha]} (docs/ha.md, "Status").  Its parts: the voting rules
(L{meshroute.ha.quorum}), the candidate's election
(L{meshroute.ha.election}), the active's lease (L{meshroute.ha.lease}),
the role (L{meshroute.ha.role}), the voters it asks
(L{meshroute.ha.voters}) and its own (L{meshroute.ha.witness}, over
L{meshroute.ha.records}), replication (L{meshroute.ha.replication} over
the gate, source, replica, listener, feed and follower) and the settings
(L{meshroute.ha.settings}).  Every router's L{meshroute.ha.witness}
answers votes and heartbeats on its routing listener from durable
records.
"""
