"""
Voter records in memory (L{IVoterRecords}) whose saves become durable
when the test says so: the witness tests and the HA tests that vote.
"""

from twisted.internet.defer import Deferred, fail, succeed
from zope.interface import implementer
from meshroute.interfaces import IVoterRecords


@implementer(IVoterRecords)
class HeldRecords:
    """
    Voter records in memory; each save is durable when the test says so
    (C{hold}), or at once.

    @ivar durable: the records as saved durably.
    @ivar pending: the saves not yet durable, oldest first.
    """

    def __init__(self, records: dict | None = None) -> None:
        self.durable = dict(records or {})
        self.pending: list[tuple[Deferred, str, tuple]] = []
        self.hold = False
        self.fail_next = False

    def voter_records(self):
        return succeed(dict(self.durable))

    def save_voter_record(self, group, record, lease_timeout_ms):
        if self.fail_next:
            failure, self.fail_next = self.fail_next, False
            return fail(failure if isinstance(failure, Exception) else OSError("disk full"))
        d = Deferred()
        self.pending.append((d, group, (record, lease_timeout_ms)))
        if not self.hold:
            self.flush()
        return d

    def flush(self) -> None:
        while self.pending:
            d, group, saved = self.pending.pop(0)
            self.durable[group] = saved
            d.callback(None)
