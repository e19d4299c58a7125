"""
Routing: what a router knows of the mesh and where to forward.

L{RouteTable} is a pure link-state route table (no reactor, no I/O): the
link layer tells it which delivery-stage links are up, hands it the
L{Advertisement}s that arrive from neighbours, and floods whatever it
returns.  The forwarding engine asks it for the next hop of a destination
router.  See C{docs/routing.md}.
"""

from meshroute.routing.table import Advertisement, RouteTable

__all__ = ["Advertisement", "RouteTable"]
