"""
How a delivery-stage channel (L{PeerChannel}) cuts what it sends into
frames: batches of consecutive sequence numbers bounded in count and
bytes at version 4, one message per frame before; and when it takes more
from the backlog.
"""

from twisted.internet.task import Clock

from support.fakes import ChannelStore, RecordingChannelEngine
from meshroute.messages import Message
from meshroute.router.peer_channel import PeerChannel
from meshroute.wire.codec import encode
from meshroute.wire.frames import (
    BATCH_MAX_BYTES,
    BATCH_MAX_MESSAGES,
    FastTransfer,
    FastTransferBatch,
    Recovery,
    Transfer,
    TransferBatch,
)


def channel(version: int = 4, store: ChannelStore | None = None,
            engine: RecordingChannelEngine | None = None) -> tuple[PeerChannel, list, Clock]:
    clock = Clock()
    sent: list = []
    link = PeerChannel("router-b", version, sent.append, None, None,
                       engine or RecordingChannelEngine(), store or ChannelStore(), clock,
                       flush=lambda: None)
    return link, sent, clock


def replay(version: int, assigned: list) -> tuple[PeerChannel, list, Clock]:
    """
    A channel whose recovery replays C{assigned} (C{(seq, message)}): it
    sends what it is handed.
    """
    store = ChannelStore()
    store.answers["outbox"] = assigned
    link, sent, clock = channel(version, store)
    recover(link)
    return link, sent, clock


def recover(link: PeerChannel) -> None:
    link.recovered(Recovery(0, "peer-store", ChannelStore.store_id))


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
    numbers = [1, 2, 3, 5, 6, 8, *range(10, 10 + BATCH_MAX_MESSAGES + 1)]
    _, sent, _ = replay(4, [(seq, message(seq)) for seq in numbers])
    assert [type(f) for f in sent] == [TransferBatch, TransferBatch, Transfer, TransferBatch,
                                       Transfer]
    assert seqs(sent) == [[1, 2, 3], [5, 6], [8], list(range(10, 10 + BATCH_MAX_MESSAGES)),
                          [10 + BATCH_MAX_MESSAGES]]
    first = sent[0].messages[0]
    assert (first[0], first[4], first[7]) == ("router-a:ab:1", 1, b"x" * 10)  # one more hop


def test_a_batch_is_bounded_in_bytes_and_a_large_message_travels_alone():
    size = BATCH_MAX_BYTES // 4
    sizes = [size, size, size, size, BATCH_MAX_BYTES + 1, 10, 10]
    _, sent, _ = replay(4, [(n, message(n, s)) for n, s in enumerate(sizes, 1)])
    assert seqs(sent) == [[1, 2, 3], [4], [5], [6, 7]]
    assert type(sent[2]) is Transfer
    assert all(len(encode(f)) <= BATCH_MAX_BYTES for f in sent if type(f) is TransferBatch)


def test_before_version_4_each_message_has_its_own_frame():
    link, sent, clock = replay(3, [(n, message(n)) for n in (1, 2, 3)])
    link.send_transient(message(4, persistent=False))
    link.send_transient(message(5, persistent=False))
    assert [type(f) for f in sent] == [Transfer] * 3 + [FastTransfer] * 2
    assert clock.getDelayedCalls() == []


def test_non_persistent_messages_wait_for_the_end_of_the_turn_or_a_full_batch():
    link, sent, clock = channel()
    for n in range(BATCH_MAX_MESSAGES + 3):
        link.send_transient(message(n, persistent=False))
    assert [len(f.messages) for f in sent] == [BATCH_MAX_MESSAGES]
    clock.advance(0)
    assert [type(f) for f in sent] == [FastTransferBatch, FastTransferBatch]
    assert [len(f.messages) for f in sent] == [BATCH_MAX_MESSAGES, 3]
    link.send_transient(message(1000, persistent=False))
    clock.advance(0)
    assert type(sent[-1]) is FastTransfer  # alone in its turn


def test_a_closing_link_sends_what_its_turn_gathered():
    link, sent, clock = channel()
    recover(link)
    link.send_transient(message(1, persistent=False))
    link.send_transient(message(2, persistent=False))
    link.closed()
    assert [len(f.messages) for f in sent] == [2]
    assert clock.getDelayedCalls() == []


def test_an_assign_that_took_messages_is_followed_by_one_for_those_being_accepted():
    """
    A message accepted while the link's assign is in flight is assigned as
    soon as that assign returns (its assign follows its accept in the
    store's order), not only once its accept is durable; an assign that
    took nothing is followed by none, so the link cannot pump in a loop.
    """
    # A backlog that is empty but for messages being accepted, whose
    # assigns wait for the test to answer them.
    store = ChannelStore()
    store.hold("assign")
    engine = RecordingChannelEngine()
    being_accepted = engine.being_accepted = {"router-c": 1}
    engine.serving = frozenset({"router-c"})
    link, sent, _ = channel(store=store, engine=engine)
    recover(link)
    link.pump(ahead=True)
    assert len(store.held["assign"]) == 1
    being_accepted["router-c"] = 2  # Another send, while the assign is in flight.
    link.pump(ahead=True)
    assert len(store.held["assign"]) == 1
    being_accepted["router-c"] = 1  # The first accept is durable...
    store.held["assign"][0].callback([(1, message(1))])  # ...and its assign returns.
    assert seqs(sent) == [[1]]
    assert len(store.held["assign"]) == 2
    store.held["assign"][1].callback([])  # Answered before the accept.
    assert len(store.held["assign"]) == 2
