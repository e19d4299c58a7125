"""
The words a connection's life is told in: the stages it goes through and
what it is for.

A stage is what the C{link.stage} and C{link.closed} events, the admin
API's C{/links} and C{/metrics} say a connection is in; the machines
(L{meshroute.link.machine}) move it from one to the next.  A routing link
goes through C{connect → authentication → recovery → delivery}; a vote
connection and a replication connection share the first two, then leave
the link's path for their own stage.
"""

CONNECT = "connect"
AUTHENTICATION = "authentication"
RECOVERY = "recovery"
DELIVERY = "delivery"
#: The stage of a vote connection after authentication.
VOTING = "voting"
#: The stage of a replication connection after authentication.
REPLICATION = "replication"

#: What a connection is for: a routing link, HA votes and heartbeats, or
#: an HA pair's replication.
ROUTING = "routing"
VOTES = "votes"
REPLICA = "replica"
