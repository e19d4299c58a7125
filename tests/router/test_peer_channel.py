"""
Tests for L{meshroute.router.peer_channel}: the delivery stage of one link, its
sending machine and its acknowledgements (L{meshroute.router.acknowledgements})
walked transition by transition with a recording store and engine
(L{fakes.ChannelStore}, L{fakes.RecordingChannelEngine}) and a
L{task.Clock}; no link, no socket.
"""

import pytest
from automat import NoTransition
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from support.fakes import ChannelStore, RecordingChannelEngine
from meshroute import events
from meshroute.expiry import IN_BACKLOG
from meshroute.messages import EXPIRES_HEADER, Message
from meshroute.router.acknowledgements import PROBE_EVERY
from meshroute.router.peer_channel import (
    ACK_DELAY_S,
    ACK_EVERY,
    ASSIGN_BATCH,
    TOO_LARGE,
    WINDOW,
    WINDOW_BYTES,
    PeerChannel,
)
from meshroute.wire.codec import MAX_MESSAGE_FRAME_SIZE
from meshroute.wire.frames import (
    Ack,
    FastTransfer,
    Recovery,
    Routes,
    Transfer,
    TransferBatch,
)

PEER = "router-b"


class Link:
    """
    A channel to L{PEER} and what it did: the frames it sent, the link
    events it emitted and the closes it asked for.
    """

    def __init__(self, store: ChannelStore | None = None, version: int = 4) -> None:
        self.clock = Clock()
        self.store = store or ChannelStore()
        self.engine = RecordingChannelEngine()
        self.sent: list = []
        self.events: list[tuple] = []
        self.failures: list[str] = []
        # How many frames were sent by each flush.
        self.flushes: list[int] = []
        self.channel = PeerChannel(
            PEER, version, self.sent.append, self.failures.append,
            lambda event, **fields: self.events.append((event, fields)),
            self.engine, self.store, self.clock,
            flush=lambda: self.flushes.append(len(self.sent)))

    def take_sent(self) -> list:
        sent, self.sent[:] = list(self.sent), []
        return sent

    def store_calls(self, name: str) -> list[tuple]:
        return [call[1:] for call in self.store.calls if call[0] == name]


def message(n: int, size: int = 10, headers=None) -> Message:
    return Message(f"router-a:ab:{n}", "router-a", "router-c", "q", b"x" * size,
                   headers=headers or {}, accepted_at=1.5)


def recovered(link: Link, last_received: int = 0) -> None:
    """
    The peer's Recovery: it holds our transfers up to C{last_received}.
    """
    link.channel.recovered(Recovery(last_received, "peer-store", link.store.store_id))


@pytest.fixture
def link() -> Link:
    """
    A channel past its recovery (nothing to replay), ready: the backlog
    of router-c, which the peer may take, holds messages, and the store
    answers assigns when the test says.
    """
    made = Link()
    made.engine.serving = frozenset({"router-c"})
    made.store.hold("assign")
    recovered(made)
    made.store.backlog["router-c"] = 5
    return made


# -- recovery ------------------------------------------------------------------


def test_the_outbox_the_peer_lacks_is_replayed_before_anything_new():
    link = Link()
    link.engine.serving = frozenset({"router-c"})
    link.store.backlog["router-c"] = 1
    link.channel.pump()  # Before the Recovery: moot.
    link.store.hold("outbox")
    recovered(link, last_received=3)
    # The peer holds 1..3: forgotten, then the rest asked for.
    assert link.store_calls("acknowledge") == [(PEER, 3)]
    assert link.store_calls("outbox") == [(PEER, 3)]
    link.channel.pump()  # While replaying: moot.
    assert link.store_calls("assign") == []
    link.store.hold("assign")
    link.store.held["outbox"][0].callback([(4, message(4)), (5, message(5))])
    assert [type(f) for f in link.take_sent()] == [TransferBatch]
    # Replayed: now the backlog.
    assert link.store_calls("assign") == [
        (PEER, frozenset({"router-c"}), ASSIGN_BATCH, WINDOW_BYTES - 20)]


def test_a_recovery_about_another_store_of_ours_holds_nothing():
    link = Link()
    link.channel.recovered(Recovery(7, "peer-store", "a-store-we-lost"))
    assert link.store_calls("acknowledge") == [(PEER, 0)]
    assert link.store_calls("outbox") == [(PEER, 0)]


def test_a_new_store_of_the_peer_forgets_what_its_old_one_sent():
    """
    The peer restarted with an empty data dir: its store id changed, so
    the sequences received from the old one are forgotten (a link event
    says so), and its transfers from 1 on are new.
    """
    link = Link(ChannelStore(last_received=40, peer_store_id="old-peer-store"))
    recovered(link)
    assert link.store_calls("record_peer_store") == [(PEER, "peer-store", True)]
    assert link.events == [(events.LINK_INCARNATION, {
        "previous_store_id": "old-peer-store", "store_id": "peer-store",
        "discarded_last_received": 40})]
    link.channel.transferred(Transfer(1, *_wire(message(1))))
    assert link.engine.calls[-1] == ("arrived", PEER, 1, 0, "router-a:ab:1")


def test_a_first_peer_store_is_recorded_without_forgetting_anything():
    link = Link(ChannelStore(last_received=40))
    recovered(link)
    assert link.store_calls("record_peer_store") == [(PEER, "peer-store", False)]
    assert link.events == []
    link.channel.transferred(Transfer(41, *_wire(message(41))))
    assert link.engine.calls[-1] == ("arrived", PEER, 41, 40, "router-a:ab:41")


def test_the_recovery_comes_once():
    link = Link()
    recovered(link)
    with pytest.raises(NoTransition):
        recovered(link)


# -- assigning ---------------------------------------------------------------------


def test_one_assign_in_flight_at_a_time(link):
    link.channel.pump()
    link.channel.pump()
    assert len(link.store.held["assign"]) == 1
    link.store.held["assign"][0].callback([(1, message(1)), (2, message(2))])
    assert [type(f) for f in link.take_sent()] == [TransferBatch]
    assert link.channel.in_flight == 2
    assert link.channel.in_flight_bytes == 20
    # It took some: the next pump follows at once.
    assert len(link.store.held["assign"]) == 2


def test_every_link_acknowledges_what_is_due_before_the_transfers(link):
    link.channel.pump()
    sent_by_then = []
    link.engine.acknowledge_due = lambda: sent_by_then.append(len(link.sent))
    link.store.held["assign"][0].callback([(1, message(1))])
    assert sent_by_then == [0]
    assert link.take_sent() == [Transfer(1, *_wire(message(1)))]


def test_no_backlog_no_assign(link):
    link.store.backlog.clear()
    link.channel.pump()
    assert link.store_calls("assign") == []
    # Messages being accepted count when the pump says so.
    link.engine.being_accepted["router-c"] = 1
    link.channel.pump()
    assert link.store_calls("assign") == []
    link.channel.pump(ahead=True)
    assert len(link.store_calls("assign")) == 1


def test_a_full_window_takes_nothing_until_acknowledged(link):
    link.channel.pump()
    link.store.held["assign"][0].callback([(n, message(n)) for n in range(1, WINDOW + 1)])
    assert link.channel.in_flight == WINDOW
    assert len(link.store_calls("assign")) == 1
    link.channel.acknowledged(Ack(10))
    assert link.channel.in_flight == WINDOW - 10
    assert link.store_calls("assign")[-1][2] == 10


def test_too_large_a_message_is_dead_lettered_before_what_follows_is_sent(link):
    link.store.hold("dead_letter")
    large = message(2, size=MAX_MESSAGE_FRAME_SIZE)
    link.channel.pump()
    link.store.held["assign"][0].callback([(1, message(1)), (2, large), (3, message(3))])
    assert link.take_sent() == [Transfer(1, *_wire(message(1)))]
    assert link.store_calls("dead_letter") == [(large, TOO_LARGE)]
    link.channel.pump()  # Still assigning: moot.
    assert len(link.store_calls("assign")) == 1
    link.store.held["dead_letter"][0].callback(None)
    assert ("dead_lettered", large, TOO_LARGE) in link.engine.calls
    assert ("outbox_resolved", 1, PEER) in link.engine.calls
    assert link.take_sent() == [Transfer(3, *_wire(message(3)))]
    assert len(link.store_calls("assign")) == 2


def test_expired_messages_go_to_expired_before_what_follows_is_sent(link):
    link.clock.advance(1)
    expired = [message(n, headers={EXPIRES_HEADER: "1000"}) for n in (1, 2)]
    link.channel.pump()
    link.store.held["assign"][0].callback([(1, expired[0]), (2, expired[1]), (3, message(3))])
    assert link.store_calls("expire") == [(expired,)]
    assert ("moved_to_expired", expired, IN_BACKLOG) in link.engine.calls
    assert ("outbox_resolved", 2, PEER) in link.engine.calls
    assert link.take_sent() == [Transfer(3, *_wire(message(3)))]


# -- acknowledgements from the peer --------------------------------------------------


def test_an_ack_forwards_what_it_covers_and_pumps(link):
    link.channel.pump()
    link.store.held["assign"][0].callback([(n, message(n)) for n in (1, 2, 3)])
    link.store.held["assign"][1].callback([])
    link.channel.acknowledged(Ack(2))
    assert ("emit_forwarded_many", PEER, [message(1), message(2)]) in link.engine.calls
    assert link.store_calls("acknowledge")[-1] == (PEER, 2)
    assert link.channel.in_flight == 1
    assert link.channel.in_flight_bytes == 10
    assert len(link.store.held["assign"]) == 3


def test_an_ack_while_assigning_pumps_nothing(link):
    link.channel.pump()
    link.channel.acknowledged(Ack(0))
    assert len(link.store.held["assign"]) == 1


# -- the transport's flow -------------------------------------------------------------


def test_a_paused_link_takes_nothing_until_it_resumes(link):
    link.channel.pause()
    assert link.channel.paused
    link.channel.pump()
    assert link.store_calls("assign") == []
    link.channel.resume()
    assert not link.channel.paused
    assert ("link_resumed", PEER) in link.engine.calls
    assert len(link.store_calls("assign")) == 1


def test_what_an_assign_took_is_sent_even_if_the_link_paused_meanwhile(link):
    link.channel.pump()
    link.channel.pause()
    link.store.held["assign"][0].callback([(1, message(1))])
    assert len(link.take_sent()) == 1
    assert len(link.store_calls("assign")) == 1  # No more while paused.
    link.channel.resume()
    assert len(link.store_calls("assign")) == 2


def test_a_resume_while_assigning_releases_but_assigns_no_more(link):
    link.channel.pump()
    link.channel.pause()
    link.channel.resume()
    assert ("link_resumed", PEER) in link.engine.calls
    assert len(link.store_calls("assign")) == 1


def test_a_pause_is_seen_at_once_inside_a_resume():
    """
    The engine hands waiting non-persistent messages over on a resume,
    one by one, until the transport pauses: the pause it causes is
    visible before its next one.
    """
    link = Link(version=3)
    recovered(link)
    seen = []

    def release(peer: str) -> None:
        for n in range(3):
            if link.channel.paused:
                break
            link.channel.send_transient(message(n))
            seen.append(n)
            if n == 1:
                link.channel.pause()  # The transport's buffer filled.

    link.engine.link_resumed = release
    link.channel.resume()
    assert seen == [0, 1]
    assert [type(f) for f in link.sent] == [FastTransfer, FastTransfer]


# -- the end ----------------------------------------------------------------------------


def test_closing_keeps_the_outbox_and_ignores_what_the_store_answers_late(link):
    link.channel.pump()
    link.channel.closed()
    assert ("link_down", PEER, link.channel) in link.engine.calls
    link.store.held["assign"][0].callback([(1, message(1))])
    assert link.sent == []
    assert link.channel.in_flight == 0
    link.channel.pump()
    link.channel.resume()
    assert len(link.store_calls("assign")) == 1


def test_a_store_failure_closes_the_link_and_nothing_more_is_sent(link, observe_errors):
    link.channel.transferred(Transfer(1, *_wire(message(1))))
    link.channel.pump()
    link.store.held["assign"][0].errback(OSError("disk I/O error"))
    assert link.failures == ["taking messages from the backlog failed: disk I/O error"]
    assert len(observe_errors.take(lambda e: e.get("log_failure"))) == 1
    # The durable transfer is not acknowledged, on a turn's end or on demand.
    link.channel.send_ack()
    link.clock.advance(1)
    assert link.sent == []
    # A later failure is only logged; the channel closes with the link.
    link.channel.acknowledged(Ack(1))
    link.engine.arrivals = Deferred()
    link.channel.transferred(Transfer(2, *_wire(message(2))))
    link.engine.arrivals.errback(OSError("again"))
    assert len(link.failures) == 1
    link.channel.closed()
    assert ("link_down", PEER, link.channel) in link.engine.calls


def test_a_transfer_durable_after_the_close_still_moves_on(link):
    link.engine.arrivals = Deferred()
    link.channel.transferred(Transfer(1, *_wire(message(1))))
    link.channel.closed()
    link.engine.arrivals.callback(("router-d",))
    assert ("pump_towards", "router-d") in link.engine.calls
    assert link.sent == []


def test_what_the_turn_gathered_goes_when_the_link_closes(link):
    link.channel.send_transient(message(1))
    link.channel.send_transient(message(2))
    link.channel.closed()
    assert [len(f.messages) for f in link.sent] == [2]
    assert link.clock.getDelayedCalls() == []


# -- acknowledging what arrives ------------------------------------------------------------


def test_an_arrival_to_forward_is_acknowledged_at_the_end_of_its_turn_then_forwarded(link):
    link.engine.onward = ("router-d",)
    link.channel.transferred(Transfer(1, *_wire(message(1))))
    link.channel.transferred_batch(TransferBatch(2, [_wire(message(2)), _wire(message(3))]))
    assert link.sent == []
    link.clock.advance(0)
    assert link.sent == [Ack(3)]
    calls = link.engine.calls
    assert calls[-1] == ("pump_towards", "router-d")


def test_a_few_arrivals_with_nothing_to_forward_wait_for_more(link):
    link.channel.transferred(Transfer(1, *_wire(message(1))))
    link.clock.advance(0)
    assert link.sent == []
    link.channel.transferred(Transfer(2, *_wire(message(2))))
    link.clock.advance(0)
    link.clock.advance(ACK_DELAY_S)
    assert link.sent == [Ack(2)]
    assert link.clock.getDelayedCalls() == []


def _arrive_alone(link, seq: int) -> None:
    "Transfer C{seq} arrives and becomes durable, in a turn of its own."
    link.channel.transferred(Transfer(seq, *_wire(message(seq))))
    link.clock.advance(0)


def test_a_wait_that_brings_nothing_more_makes_the_next_acks_go_at_once(link):
    """
    A sender that waits for each Ack before its next transfer (a producer
    answered through its origin's held accept): the first Ack waits and
    brings nothing more, so the next ones go at the end of their turn.
    """
    _arrive_alone(link, 1)
    assert link.sent == []
    link.clock.advance(ACK_DELAY_S)
    assert link.take_sent() == [Ack(1)]
    for seq in (2, 3, 4):
        _arrive_alone(link, seq)
        assert link.take_sent() == [Ack(seq)]


def test_acks_sent_at_once_wait_again_now_and_then(link):
    """
    One in every PROBE_EVERY waits again; if more arrive meanwhile, the
    Acks go back to waiting for more.
    """
    _arrive_alone(link, 1)
    link.clock.advance(ACK_DELAY_S)
    link.take_sent()
    for seq in range(2, 2 + PROBE_EVERY):
        _arrive_alone(link, seq)
    assert len(link.take_sent()) == PROBE_EVERY
    probe = 2 + PROBE_EVERY
    _arrive_alone(link, probe)
    assert link.take_sent() == []  # it waits
    _arrive_alone(link, probe + 1)
    link.clock.advance(ACK_DELAY_S)
    assert link.take_sent() == [Ack(probe + 1)]
    _arrive_alone(link, probe + 2)
    assert link.take_sent() == []  # waiting pays again


def test_many_arrivals_are_acknowledged_at_the_end_of_their_turn(link):
    items = [_wire(message(n)) for n in range(1, ACK_EVERY + 1)]
    link.channel.transferred_batch(TransferBatch(1, items))
    link.clock.advance(0)
    assert link.sent == [Ack(ACK_EVERY)]


def test_an_acknowledgement_due_goes_at_once(link):
    link.channel.transferred(Transfer(1, *_wire(message(1))))
    link.channel.send_ack()
    assert link.sent == [Ack(1)]
    link.channel.send_ack()
    link.clock.advance(1)
    assert link.sent == [Ack(1)]


# -- what a turn wrote, handed to the kernel at once ---------------------------------------


def test_transfers_handed_from_the_backlog_are_flushed_once_written(link):
    link.channel.pump()
    link.store.held["assign"][0].callback([(1, message(1)), (2, message(2))])
    assert [type(f) for f in link.sent] == [TransferBatch]
    assert link.flushes == [1]


@pytest.mark.parametrize("stopping", ["expired", "too-large"])
def test_transfers_written_before_a_message_that_stops_the_batch_are_flushed(link, stopping):
    """
    An expired message (moved to C{$expired}) or one too large for any
    link (dead-lettered) ends the batch there: what was written before
    it is handed to the kernel all the same.
    """
    if stopping == "expired":
        link.clock.advance(2)
        stop = message(2, headers={EXPIRES_HEADER: "1000"})
        link.store.hold("expire")
    else:
        stop = message(2, size=MAX_MESSAGE_FRAME_SIZE)
        link.store.hold("dead_letter")
    link.channel.pump()
    link.store.held["assign"][0].callback([(1, message(1)), (2, stop), (3, message(3))])
    assert link.sent == [Transfer(1, *_wire(message(1)))]
    assert link.flushes == [1]


def test_an_expired_first_message_flushes_nothing(link):
    link.clock.advance(2)
    link.channel.pump()
    link.store.held["assign"][0].callback([(1, message(1, headers={EXPIRES_HEADER: "1000"}))])
    assert link.sent == [] and link.flushes == []


def test_the_turns_non_persistent_messages_are_flushed_once_written(link):
    link.channel.send_transient(message(1))
    link.channel.send_transient(message(2))
    assert link.flushes == []
    link.clock.advance(0)
    assert [len(f.messages) for f in link.sent] == [2]
    assert link.flushes == [1]


def test_an_ack_is_flushed_at_the_end_of_its_turn_and_of_its_wait(link):
    link.engine.onward = ("router-d",)
    link.channel.transferred(Transfer(1, *_wire(message(1))))
    link.clock.advance(0)
    assert link.sent == [Ack(1)]
    assert link.flushes == [1]
    link.engine.onward = ()
    link.channel.transferred(Transfer(2, *_wire(message(2))))
    link.clock.advance(0)
    assert link.flushes == [1]  # it waits for more
    link.clock.advance(ACK_DELAY_S)
    assert link.sent == [Ack(1), Ack(2)]
    assert link.flushes == [1, 2]


def test_an_ack_due_before_transfers_is_flushed_with_them(link):
    link.channel.transferred(Transfer(1, *_wire(message(1))))
    link.channel.send_ack()
    assert link.flushes == []
    link.channel.pump()
    link.store.held["assign"][0].callback([(1, message(1))])
    assert link.flushes == [2]


# -- what else arrives ---------------------------------------------------------------------


def test_non_persistent_messages_and_routes_go_to_the_engine(link):
    link.channel.fast_transferred(FastTransfer(*_wire(message(1))))
    frame = Routes([["router-c", 1, ["router-b"]]])
    link.channel.routes(frame)
    assert link.engine.calls[-2:] == [("arrived_transient", "router-a:ab:1"),
                                      ("routes_received", PEER, frame)]


def _wire(m: Message) -> tuple:
    """
    C{m}'s fields as a transfer carries them, one hop on.
    """
    return (m.msg_id, m.origin, m.dest_router, m.dest_queue, m.hops + 1, m.accepted_at,
            m.headers, m.body)
