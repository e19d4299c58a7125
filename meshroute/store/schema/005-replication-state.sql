-- meshroute store, schema version 5: the replication position.
--
-- The upgrade step from version 4, applied by SQLiteStore.open() inside
-- one transaction with schema_version = 5.
--
-- An HA pair replicates its store statement by statement
-- (meshroute.store.changes, docs/ha.md "Replication"): every committed write
-- transaction of the active is one change batch, numbered by position
-- (continuous across epochs) and tagged with the epoch the active served
-- in.  The executor writes the batch's (epoch, position) into this one row
-- inside the batch's own transaction, and the backup does the same when
-- it applies it: a store's data and its position always agree, across
-- crashes and snapshots.  A router without HA leaves it at (0, 0).
CREATE TABLE replication_state (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    epoch INTEGER NOT NULL,
    position INTEGER NOT NULL
);
INSERT INTO replication_state (id, epoch, position) VALUES (1, 0, 0);
