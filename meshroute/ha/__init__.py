"""
High availability: the runtime of a primary/backup pair.

One instance of a pair is an L{meshroute.ha.instance.HAInstance}
(built by L{meshroute.ha.build}), which twistd runs for a configuration
with C{[ha]} (docs/ha.md, "Status").  It carries out the rules of
L{meshroute.harules} (the voting rules, the candidate's election, the
active's lease, the role and the settings) with its parts here: what it
asks the voters (L{meshroute.ha.activation}, through
L{meshroute.ha.voters}), its own voter (L{meshroute.ha.own_voter}: a
L{meshroute.router.witness.Witness} over the records of
L{meshroute.ha.records}), the router it runs while active
(L{meshroute.ha.active_router}), its hand-overs
(L{meshroute.ha.handover}), and replication
(L{meshroute.ha.store_replication} over the gate, source, replica, epoch
starts, listener, feed and follower).

This package sits above the router core: an active instance runs a
L{meshroute.router.service.RouterService}, and every router, HA or not, answers
votes with its witness.  What sits above it (the admin API) is handed
down by the composition layer (L{meshroute.process}), never imported.
"""
