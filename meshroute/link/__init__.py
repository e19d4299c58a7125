"""
The routing link between two routers: the link's machines (machine.py)
over its core (core.py), the handshake's checks (handshake.py), the
voting stage of vote connections (votes.py), keepalive, the link and its
protocol and factories (link.py), and the listener and connector that
create links.
"""
