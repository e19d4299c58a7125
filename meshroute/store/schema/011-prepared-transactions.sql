-- meshroute store, schema version 11: prepared (two-phase) transactions.
--
-- The upgrade step from version 10, applied by SQLiteStore.open() inside
-- one transaction with schema_version = 11.
--
-- A client's transaction prepared under an xid (client protocol version
-- 7, docs/client-protocol.md "Two-phase commit") is durable until a
-- commit or rollback of that xid decides it, from any session, after any
-- restart or failover (the store is what an HA pair replicates or
-- shares).  meshroute.store.prepared writes and reads these tables.
--
-- prepared_transactions: one row per prepared transaction, its xid
-- unique; user_name is the authenticated user that prepared it (NULL on
-- a router without users): only that user decides it.
CREATE TABLE prepared_transactions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    format_id INTEGER NOT NULL,
    global_id TEXT NOT NULL,
    branch TEXT NOT NULL,
    user_name TEXT,
    client_id TEXT NOT NULL,
    prepared_at REAL NOT NULL,
    UNIQUE (format_id, global_id, branch)
);

-- Its sends, in order (id), as the client sent them: nothing of them is
-- accepted (no message, no duplicate id) until the commit, which accepts
-- them as a one-phase commit would.  headers is msgpack (NULL when
-- empty); sender is the session's expiry-notice id.
CREATE TABLE prepared_sends (
    id INTEGER PRIMARY KEY,
    prepared INTEGER NOT NULL,
    address TEXT NOT NULL,
    headers BLOB,
    body BLOB NOT NULL,
    persistent INTEGER NOT NULL,
    duplicate_id TEXT NOT NULL,
    ttl_ms INTEGER NOT NULL,
    notify_expiry INTEGER NOT NULL,
    sender TEXT NOT NULL
);
CREATE INDEX prepared_sends_of ON prepared_sends (prepared, id);

-- The queue entries it acknowledged: their messages rows leave state
-- 'queue' for state 'prepared' (so no fetch, consume, sweep or expiry
-- touches them: they are locked to the transaction) until the commit
-- deletes them or the rollback puts them back, flagged redelivered.
CREATE TABLE prepared_acks (
    entry INTEGER PRIMARY KEY,
    prepared INTEGER NOT NULL
);
CREATE INDEX prepared_acks_of ON prepared_acks (prepared);

-- The xids committed here (prepared or in one phase), kept for the
-- duplicate-id window: a commit retried after its answer was lost (a
-- failover) is answered "committed", not "unknown".  Rows are in
-- insertion order (id), pruned as duplicate_ids are.
CREATE TABLE committed_xids (
    id INTEGER PRIMARY KEY,
    format_id INTEGER NOT NULL,
    global_id TEXT NOT NULL,
    branch TEXT NOT NULL,
    user_name TEXT,
    at REAL NOT NULL,
    UNIQUE (format_id, global_id, branch)
);
