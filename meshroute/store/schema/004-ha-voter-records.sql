-- meshroute store, schema version 4: the HA voter records.
--
-- The upgrade step from version 3, applied by SQLiteStore.open() inside
-- one transaction with schema_version = 4.
--
-- Every router is a witness: it answers HA vote requests and heartbeats
-- on its routing listener (docs/ha.md).  One row per HA group it has
-- voted for holds that group's voter record (meshroute.harules.quorum
-- VoterRecord): the newest epoch granted, to which instance, that
-- instance's position (epoch, position) when granted, and the confirmed
-- position (epoch, position).  lease_timeout_ms is the longest
-- lease-timeout the group's instances have told this voter: it waits
-- that long after the active's last heartbeat before granting anyone
-- else an epoch.  A row is written (durably) before the answer that
-- depends on it is sent.
CREATE TABLE ha_voter_records (
    group_name TEXT PRIMARY KEY,
    granted_epoch INTEGER NOT NULL,
    granted_to TEXT,
    granted_at_epoch INTEGER NOT NULL,
    granted_at_position INTEGER NOT NULL,
    confirmed_epoch INTEGER NOT NULL,
    confirmed_position INTEGER NOT NULL,
    lease_timeout_ms INTEGER NOT NULL
);
