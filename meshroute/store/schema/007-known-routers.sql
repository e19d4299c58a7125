-- meshroute store, schema version 7: the routers this router has heard of.
--
-- The upgrade step from version 6, applied by SQLiteStore.open() inside
-- one transaction with schema_version = 7.
--
-- A client's send to a router of the mesh is refused (unknown-router)
-- only when that name was never heard of (docs/routing.md).  What was
-- heard lives in the route table, in memory; one row per name heard
-- (a direct peer, the origin of a route advertisement or a router
-- listed in one) keeps it across restarts, and in the replicated copy
-- an HA backup serves from when it takes over.  A row is written once,
-- when the name is first heard (meshroute.routing.known), and never
-- changed; first_heard (epoch seconds) is for the operator who wants to
-- forget a name (docs/routing.md "Forgetting a router").
CREATE TABLE known_routers (
    router TEXT PRIMARY KEY,
    first_heard REAL NOT NULL
);
