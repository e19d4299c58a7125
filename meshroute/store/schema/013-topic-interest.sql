-- meshroute store, schema version 13: the topic interest of other routers.
--
-- The upgrade step from version 12, applied by SQLiteStore.open() inside
-- one transaction with schema_version = 13.
--
-- The newest interest advertisement this router took from each other
-- router (docs/topics.md): its version and its patterns (a JSON array;
-- empty once withdrawn).  Read at start, before the topic fan-out takes
-- the publications a previous run left, so that they go where the mesh's
-- interest was, not where a router that has heard nothing yet thinks it
-- is; and kept while a router is unreachable, so its durable
-- subscriptions keep collecting across our restarts and failovers.
-- meshroute.store.topics writes and reads it.
CREATE TABLE topic_interest (
    origin TEXT PRIMARY KEY,
    version INTEGER NOT NULL,
    patterns TEXT NOT NULL
) WITHOUT ROWID;
