"""
The rows of a witness's voter records (C{ha_voter_records}, schema
versions 4 and 10), read and written alike wherever they live: in a
router's C{store.db} (L{meshroute.store.sqlite.SQLiteStore}, for every
group it votes for) and in an HA instance's own C{ha.db}
(L{meshroute.ha.records}, for its own group), as functions the store's
executors run.  A row holds the voting rules' record
(L{meshroute.harules.quorum.VoterRecord}) and the longest lease-timeout
the group's instances told the voter.
"""

from meshroute.harules.quorum import LogPosition, VoterRecord
from meshroute.store.transactions import atomic


def read_records(connection) -> dict:
    """
    C{{group: (VoterRecord, lease_timeout_ms)}} for every row.
    """
    rows = connection.execute(
        "SELECT group_name, granted_epoch, granted_to, granted_at_epoch, granted_at_position, "
        "confirmed_epoch, confirmed_position, learned, lease_timeout_ms FROM ha_voter_records"
    )
    return {
        group: (
            VoterRecord(epoch, granted_to, LogPosition(at_epoch, at_position),
                        LogPosition(confirmed_epoch, confirmed_position), bool(learned)),
            lease_timeout_ms,
        )
        for (group, epoch, granted_to, at_epoch, at_position, confirmed_epoch,
             confirmed_position, learned, lease_timeout_ms) in rows
    }


@atomic
def save_record(connection, group: str, record: VoterRecord, lease_timeout_ms: int) -> None:
    """
    Replace C{group}'s row.
    """
    connection.execute(
        "INSERT OR REPLACE INTO ha_voter_records (group_name, granted_epoch, granted_to, "
        "granted_at_epoch, granted_at_position, confirmed_epoch, confirmed_position, "
        "learned, lease_timeout_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (group, record.granted_epoch, record.granted_to, record.granted_at.epoch,
         record.granted_at.position, record.confirmed.epoch, record.confirmed.position,
         int(record.learned), lease_timeout_ms),
    )
