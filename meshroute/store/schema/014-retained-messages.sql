-- meshroute store, schema version 14: retained topic messages.
--
-- The upgrade step from version 13, applied by SQLiteStore.open() inside
-- one transaction with schema_version = 14.
--
-- The latest retained publication of each topic this router holds
-- (docs/topics.md, "Retained messages"), whichever router it was
-- published at: every router keeps the same table once the flood has
-- passed, so a subscriber anywhere is given them from its own router's
-- store, and they outlive restarts and fail over with the store (which
-- an HA pair replicates or shares).  The latest wins by (stamp, origin,
-- publication), an order every router computes alike.  An empty body is
-- a cleared topic's tombstone, kept until expires_at (milliseconds;
-- 0: never) as an expiring message is.  headers: a JSON object.
-- meshroute.store.retained writes and reads it.
CREATE TABLE retained_messages (
    topic TEXT PRIMARY KEY,
    stamp INTEGER NOT NULL,
    origin TEXT NOT NULL,
    publication TEXT NOT NULL,
    body BLOB NOT NULL,
    headers TEXT NOT NULL,
    persistent INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
) WITHOUT ROWID;
