-- meshroute store, schema version 6: the highest epoch seen per peer.
--
-- The upgrade step from version 5, applied by SQLiteStore.open() inside
-- one transaction with schema_version = 6.
--
-- The two instances of an HA pair share a router name; the active one
-- serves in an epoch its voters granted (docs/ha.md).  One row per peer
-- router name holds the highest epoch this router has seen on a routing
-- link from it (meshroute.link.epochs): a link from a lower epoch is an
-- instance that lost its place, and is refused (stale-epoch,
-- docs/protocol.md "Epochs"), across restarts.  A row is raised (never
-- lowered) durably before the link that brought the epoch is admitted.
-- Routers without HA have epoch 0 and write no row.
CREATE TABLE peer_epochs (
    peer TEXT PRIMARY KEY,
    epoch INTEGER NOT NULL
);
