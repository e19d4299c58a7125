-- meshroute store, schema version 8: what the latest epoch starts said.
--
-- The upgrade step from version 7, applied by SQLiteStore.open() inside
-- one transaction with schema_version = 8.
--
-- Every epoch of an HA pair begins with a change of its own, its start
-- record (meshroute.ha.epoch_starts, docs/ha.md "Epochs"), which says whether
-- the active runs it replicated, with its peer in sync, or alone.  The
-- start record is replicated like any change, and sets these columns of
-- the one replication_state row:
--   replicated_epoch  the newest epoch whose start named both instances
--                     (run replicated: the backup in sync);
--   alone_epoch       the newest epoch run alone, and
--   alone_instance    the instance that ran it (the only one it names).
-- An instance's position in a vote is (the newest epoch whose start
-- names it, position): a backup that caught up while the active ran
-- alone holds that epoch's changes but not that epoch as its own.
-- Routers without HA leave them at 0 and ''.
ALTER TABLE replication_state ADD COLUMN replicated_epoch INTEGER NOT NULL DEFAULT 0;
ALTER TABLE replication_state ADD COLUMN alone_epoch INTEGER NOT NULL DEFAULT 0;
ALTER TABLE replication_state ADD COLUMN alone_instance TEXT NOT NULL DEFAULT '';
