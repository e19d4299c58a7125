"""
High availability: the runtime of a primary/backup pair.

One instance of a pair is an L{meshroute.ha.instance.HAInstance}
(built by L{meshroute.ha.build}), which twistd runs for a configuration
with C{[ha]} (docs/ha.md, "Status").  It carries out the rules of
L{meshroute.harules} (the voting rules, the candidate's election, the
active's lease, the role and the settings) with its parts here: the
voters it asks (L{meshroute.ha.voters}) and its own (L{meshroute.witness},
over L{meshroute.ha.records}), and replication
(L{meshroute.ha.replication} over the gate, source, replica, listener,
feed and follower).  Every router's L{meshroute.witness} answers
votes and heartbeats on its routing listener from durable records.

This package sits above the router core: an active instance runs a
L{meshroute.node.RouterService}.
"""
