"""
How a delivery-stage channel (L{PeerChannel}) cuts what it sends into
frames: batches of consecutive sequence numbers bounded in count and
bytes at version 4, one message per frame before; and when it takes more
from the backlog.
"""

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from meshroute.engine import PeerChannel
from meshroute.messages import Message
from meshroute.wire.codec import encode
from meshroute.wire.frames import (
    BATCH_MAX_BYTES,
    BATCH_MAX_MESSAGES,
    FastTransfer,
    FastTransferBatch,
    Transfer,
    TransferBatch,
)


class _Store:
    def backlog_depths(self) -> dict:
        return {}


class _Engine:
    """
    Just enough engine for a channel that sends what it is handed.
    """

    def __init__(self) -> None:
        self._store = _Store()
        self._clock = Clock()
        self.forwarded: list[str] = []

    def acknowledge_due(self) -> None:
        pass

    def assignable(self, peer: str) -> frozenset:
        return frozenset()

    def accepting(self, router: str) -> int:
        return 0

    def emit_forwarded_many(self, peer: str, messages) -> None:
        self.forwarded.extend(message.msg_id for message in messages)


def channel(version: int = 4) -> tuple[PeerChannel, list, _Engine]:
    engine = _Engine()
    sent: list = []
    return PeerChannel(engine, "router-b", sent.append, None, None, version), sent, engine


def message(n: int, size: int = 10, persistent: bool = True) -> Message:
    return Message(f"router-a:ab:{n}", "router-a", "router-c", "q", b"x" * size,
                   persistent=persistent, accepted_at=1.5)


def seqs(frames) -> list[list[int]]:
    """
    The sequence numbers each transfer frame carries.
    """
    return [[f.seq] if type(f) is Transfer
            else list(range(f.first_seq, f.last_seq + 1)) for f in frames]


def test_a_batch_ends_at_a_gap_in_the_sequence_and_at_its_count():
    link, sent, _ = channel()
    numbers = [1, 2, 3, 5, 6, 8, *range(10, 10 + BATCH_MAX_MESSAGES + 1)]
    link._send_assigned([(seq, message(seq)) for seq in numbers])
    assert [type(f) for f in sent] == [TransferBatch, TransferBatch, Transfer, TransferBatch,
                                       Transfer]
    assert seqs(sent) == [[1, 2, 3], [5, 6], [8], list(range(10, 10 + BATCH_MAX_MESSAGES)),
                          [10 + BATCH_MAX_MESSAGES]]
    first = sent[0].messages[0]
    assert (first[0], first[4], first[7]) == ("router-a:ab:1", 1, b"x" * 10)  # one more hop


def test_a_batch_is_bounded_in_bytes_and_a_large_message_travels_alone():
    link, sent, _ = channel()
    size = BATCH_MAX_BYTES // 4
    sizes = [size, size, size, size, BATCH_MAX_BYTES + 1, 10, 10]
    link._send_assigned([(n, message(n, s)) for n, s in enumerate(sizes, 1)])
    assert seqs(sent) == [[1, 2, 3], [4], [5], [6, 7]]
    assert type(sent[2]) is Transfer
    assert all(len(encode(f)) <= BATCH_MAX_BYTES for f in sent if type(f) is TransferBatch)


def test_before_version_4_each_message_has_its_own_frame():
    link, sent, engine = channel(version=3)
    link._send_assigned([(n, message(n)) for n in (1, 2, 3)])
    link.send_transient(message(4, persistent=False))
    link.send_transient(message(5, persistent=False))
    assert [type(f) for f in sent] == [Transfer] * 3 + [FastTransfer] * 2
    assert engine._clock.getDelayedCalls() == []


def test_non_persistent_messages_wait_for_the_end_of_the_turn_or_a_full_batch():
    link, sent, engine = channel()
    for n in range(BATCH_MAX_MESSAGES + 3):
        link.send_transient(message(n, persistent=False))
    assert [len(f.messages) for f in sent] == [BATCH_MAX_MESSAGES]
    engine._clock.advance(0)
    assert [type(f) for f in sent] == [FastTransferBatch, FastTransferBatch]
    assert [len(f.messages) for f in sent] == [BATCH_MAX_MESSAGES, 3]
    link.send_transient(message(1000, persistent=False))
    engine._clock.advance(0)
    assert type(sent[-1]) is FastTransfer  # alone in its turn


def test_a_closing_link_sends_what_its_turn_gathered():
    link, sent, engine = channel()
    link.send_transient(message(1, persistent=False))
    link.send_transient(message(2, persistent=False))
    link._stop()
    assert [len(f.messages) for f in sent] == [2]
    assert engine._clock.getDelayedCalls() == []


class _HeldAssigns(_Store):
    """
    A backlog that is empty but for messages being accepted, whose
    assigns wait for the test to answer them.
    """

    def __init__(self) -> None:
        self.assigns: list[Deferred] = []

    def assign(self, peer, dest_routers, limit, max_bytes=None) -> Deferred:
        d = Deferred()
        self.assigns.append(d)
        return d


def test_an_assign_that_took_messages_is_followed_by_one_for_those_being_accepted():
    """
    A message accepted while the link's assign is in flight is assigned as
    soon as that assign returns (its assign follows its accept in the
    store's order), not only once its accept is durable; an assign that
    took nothing is followed by none, so the link cannot pump in a loop.
    """
    engine = _Engine()
    engine._store = store = _HeldAssigns()
    being_accepted = {"router-c": 1}
    engine.accepting = lambda router: being_accepted.get(router, 0)
    engine.assignable = lambda peer: frozenset({"router-c"})
    sent: list = []
    link = PeerChannel(engine, "router-b", sent.append, None, None, 4)
    link._pumping = False  # Recovered.
    link.pump(ahead=True)
    assert len(store.assigns) == 1
    being_accepted["router-c"] = 2  # Another send, while the assign is in flight.
    link.pump(ahead=True)
    assert len(store.assigns) == 1
    being_accepted["router-c"] = 1  # The first accept is durable...
    store.assigns[0].callback([(1, message(1))])  # ...and its assign returns.
    assert seqs(sent) == [[1]]
    assert len(store.assigns) == 2
    store.assigns[1].callback([])  # Answered before the accept.
    assert len(store.assigns) == 2
