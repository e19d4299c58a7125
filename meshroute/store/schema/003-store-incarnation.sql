-- meshroute store, schema version 3: store incarnations.
--
-- The upgrade step from version 2, applied by SQLiteStore.open() inside
-- one transaction with schema_version = 3.
--
-- store_id (in meta) names this store: random, chosen once when the store
-- is created (or upgraded to version 3) and never changed.  Link sequence
-- numbers only mean something within one store, so the recovery stage
-- exchanges store ids (docs/protocol.md): a router restarted with an
-- empty data dir has a new store id, and its peers learn that the
-- sequence numbers they remember from it are void.
--
-- links.peer_store_id is the store id of the peer that last_received and
-- next_seq refer to; empty until the first recovery stage with that peer
-- under version 3.
INSERT INTO meta (key, value) VALUES ('store_id', lower(hex(randomblob(16))));
ALTER TABLE links ADD COLUMN peer_store_id TEXT NOT NULL DEFAULT '';
