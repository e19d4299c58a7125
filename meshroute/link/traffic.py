"""
What a link carried: messages and bytes, each way.

A link counts as its frames go out and its bytes come in (one addition
per frame, a batch frame counting its messages), so the counts cost the
data path nothing it would notice.  A link's own counts end with its
connection; the L{meshroute.link.registry.LinkRegistry} adds them to its
peer's totals when it lets go of the link, so that what the router's
C{/metrics} shows per peer only ever grows, across reconnections
(L{meshroute.admin.metrics}).

Messages are counted as transfers: a message replayed after a
reconnection, or sent again on another route, counts again on the link
that carried it again.
"""

from dataclasses import dataclass

from meshroute.wire.frames import FastTransfer, FastTransferBatch, Transfer, TransferBatch

_SINGLE = frozenset({Transfer, FastTransfer})
_BATCH = frozenset({TransferBatch, FastTransferBatch})


def messages_in(frame) -> int:
    """
    The messages C{frame} carries: one for a transfer, a batch's count for
    a batch frame, none for any other frame.
    """
    kind = type(frame)
    if kind in _SINGLE:
        return 1
    if kind in _BATCH:
        return len(frame.messages)
    return 0


@dataclass
class Traffic:
    """
    Messages and bytes sent and received, by one link or in total.
    """

    messages_sent: int = 0
    bytes_sent: int = 0
    messages_received: int = 0
    bytes_received: int = 0

    def sent(self, frame, size: int) -> None:
        """
        C{frame} went out in C{size} bytes.
        """
        self.bytes_sent += size
        self.messages_sent += messages_in(frame)

    def add(self, other: "Traffic") -> None:
        """
        Add C{other}'s counts to these.
        """
        self.messages_sent += other.messages_sent
        self.bytes_sent += other.bytes_sent
        self.messages_received += other.messages_received
        self.bytes_received += other.bytes_received
