"""
What the recovery stage exchanges: per peer, the last message sequence
number received from it, and the last one it reports having received
from us.

Routers carry no messages yet, so nothing advances the received sequence
and the ledger lives in memory; routed messaging moves it into the
durable store and makes the sender replay from the peer's report.
"""


class RecoveryLedger:
    """
    Per-peer sequence bookkeeping for the recovery stage.
    """

    def __init__(self) -> None:
        self._received: dict[str, int] = {}
        self._peer_reports: dict[str, int] = {}

    def last_received(self, peer: str) -> int:
        """
        The last sequence we durably received from C{peer} (0: none).
        """
        return self._received.get(peer, 0)

    def peer_reported(self, peer: str, last_received: int) -> None:
        """
        C{peer} says it has received everything up to C{last_received}.
        """
        self._peer_reports[peer] = last_received

    def reported_by(self, peer: str) -> int | None:
        """
        What C{peer} last reported, or None if it never reached recovery.
        """
        return self._peer_reports.get(peer)
