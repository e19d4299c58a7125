"""
What the client listener needs to know of its router's place in a
high-availability pair (docs/ha.md, "Clients"): whether this instance is
the active one, the epoch it serves in, and the client endpoints of the
pair's instances.

The listener asks for it at every C{Open} (L{HAView} through a callable
the HA instance provides), so that an instance that stops being active
refuses new sessions at once, and every client hears the epoch in force.
A router without HA always answers L{WITHOUT_HA}: active, epoch 0, no
endpoints, which changes nothing for it or its clients.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class HAView:
    """
    The router's place in its pair, as clients are told it.

    @ivar active: whether this instance serves the router now; one that
        does not refuses C{Open} with C{not-active}.
    @ivar epoch: the epoch it serves in (0 without HA).
    @ivar endpoints: the pair's client endpoint strings
        (C{[ha] client-endpoints}, the same on both instances; empty
        without HA).
    """

    active: bool
    epoch: int
    endpoints: tuple[str, ...]


#: The view of a router without HA.
WITHOUT_HA = HAView(active=True, epoch=0, endpoints=())
