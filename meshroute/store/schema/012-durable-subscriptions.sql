-- meshroute store, schema version 12: durable topic subscriptions.
--
-- The upgrade step from version 11, applied by SQLiteStore.open() inside
-- one transaction with schema_version = 12.
--
-- A durable subscription (docs/topics.md) is a local queue, named queue,
-- that the router's topic fan-out feeds with every publication whose
-- topic matches pattern.  It is identified by client_id and name, and it
-- lasts until it is unsubscribed for good, across restarts and failovers
-- (the store is what an HA pair replicates or shares).  shared: several
-- consumers may take its messages, each message to one of them.
-- user_name is the authenticated user that made it (NULL on a router
-- without users).  meshroute.store.subscriptions writes and reads it.
CREATE TABLE durable_subscriptions (
    queue TEXT PRIMARY KEY,
    client_id TEXT NOT NULL,
    name TEXT NOT NULL,
    pattern TEXT NOT NULL,
    shared INTEGER NOT NULL,
    user_name TEXT,
    created_at REAL NOT NULL,
    UNIQUE (client_id, name)
) WITHOUT ROWID;
