"""
The router core: one router's service tree (L{meshroute.router.service}),
its message engine and what the engine is made of (accepting clients'
sends and transactions, forwarding to peers over the per-peer channels,
local queues and deliveries, expiry, routing decisions), the witness it
runs for HA pairs, and its views of the mesh.  It sits above the link and
client connections and the store, and below the HA pair runtime
(docs/architecture.md).
"""
