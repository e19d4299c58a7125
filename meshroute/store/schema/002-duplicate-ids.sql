-- meshroute store, schema version 2: the duplicate ids of client sends.
--
-- The upgrade step from version 1, applied by SQLiteStore.open() inside
-- one transaction with schema_version = 2.
--
-- A client Send with a duplicate id is accepted at most once per id within
-- the router's duplicate-id window (docs/client-protocol.md): the row is
-- written in the same transaction as the message it accepted, and a
-- second Send with that id is answered with the first message's msg_id.
-- Rows are in insertion order (id), so pruning the ones older than the
-- window deletes a prefix without scanning the rest; a row older than the
-- window counts as absent even before it is pruned.
CREATE TABLE duplicate_ids (
    id INTEGER PRIMARY KEY,
    duplicate_id TEXT NOT NULL UNIQUE,
    msg_id TEXT NOT NULL,
    at REAL NOT NULL
);
