-- meshroute store, schema version 9: message expiry.
--
-- The upgrade step from version 8, applied by SQLiteStore.open() inside
-- one transaction with schema_version = 9.
--
-- A message that a send gave a time to live carries its expiry in header
-- x-expires-ms (meshroute.messages.EXPIRES_HEADER); the store copies it
-- into expires_ms (epoch milliseconds; NULL: never) when it writes the
-- message, so that the expiry sweep finds expired entries sitting in
-- queues nobody consumes from, or in the backlog, without reading them
-- all (docs/client-protocol.md "Message expiry").  Messages set aside in
-- $expired or $dead-letter have none.  Rows written before this version
-- have none either: their expiry, if any, is still checked when they are
-- delivered or forwarded.
ALTER TABLE messages ADD COLUMN expires_ms INTEGER;
CREATE INDEX messages_expiring ON messages (expires_ms) WHERE expires_ms IS NOT NULL;
