-- meshroute store, schema version 1.
--
-- Applied by meshroute.store.sqlite.SQLiteStore.open() inside one
-- transaction, which also records schema_version = 1 in meta.  Later
-- versions add files NNN-what.sql holding only the upgrade step from the
-- version before; a released file is never edited.

CREATE TABLE meta (
    key TEXT PRIMARY KEY,
    value
) WITHOUT ROWID;

-- One row per message held by this router, wherever it is: moving a
-- message between the backlog, a link's outbox and a local queue is an
-- UPDATE of state (and peer/seq), never a copy of its body.
--
-- id: the entry id, arrival order here.  AUTOINCREMENT so that an id is
-- never reused, even after the newest row is deleted: consumers page
-- through a queue with "entry id above the last one seen".
CREATE TABLE messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    msg_id TEXT NOT NULL UNIQUE,
    origin TEXT NOT NULL,
    dest_router TEXT NOT NULL,
    dest_queue TEXT NOT NULL,
    headers BLOB,                     -- msgpack map; NULL when empty
    body BLOB NOT NULL,
    hops INTEGER NOT NULL,
    accepted_at REAL NOT NULL,
    state TEXT NOT NULL,              -- 'backlog', 'outbox' or 'queue'
    peer TEXT,                        -- outbox only
    seq INTEGER,                      -- outbox only: link sequence number
    redelivered INTEGER NOT NULL DEFAULT 0
);

-- Partial indexes: each covers only the rows in its place, so it stays as
-- small as that place.  Queries must repeat the state literal to use them.
CREATE INDEX messages_backlog ON messages (dest_router, id) WHERE state = 'backlog';
CREATE UNIQUE INDEX messages_outbox ON messages (peer, seq) WHERE state = 'outbox';
CREATE INDEX messages_queue ON messages (dest_queue, id) WHERE state = 'queue';

-- Per peer: the next link sequence number to give a message sent to it,
-- and the last one durably received from it.
CREATE TABLE links (
    peer TEXT PRIMARY KEY,
    next_seq INTEGER NOT NULL,
    last_received INTEGER NOT NULL
) WITHOUT ROWID;

-- Ids of messages enqueued here (at their destination), for duplicate
-- detection, kept for the store's dedup window.  Rows are in insertion
-- order (id), so pruning deletes a prefix without scanning the rest.
CREATE TABLE enqueued_ids (
    id INTEGER PRIMARY KEY,
    msg_id TEXT NOT NULL UNIQUE,
    at REAL NOT NULL
);
