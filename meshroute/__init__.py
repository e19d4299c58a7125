"""
meshroute: named routers, each a small broker, linked into a mesh.

The external contract (configuration, commands, admin API, event log)
is described in the README; the wire protocol in docs/protocol.md.
"""

__version__ = "0.1.0"
