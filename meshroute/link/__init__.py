"""
The routing link between two routers: handshake machine, keepalive,
protocol, and the listener and connector that create links.
"""
