"""
The accepts of a link's early sends (L{meshroute.router.early_accepts}):
held for the peer's acknowledgement, which makes them moot, and written
otherwise; on a clock, with a store whose accepts end when the test says.
"""

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.python.failure import Failure

from meshroute.messages import Message
from meshroute.router.early_accepts import EarlyAccepts, EarlyPending
from meshroute.wire.frames import Ack

HOLD_S = 0.01


class AcceptingStore:
    "Records each accept into the outbox; the test fires its Deferred."

    def __init__(self) -> None:
        self.accepts: list[tuple[str, list, Deferred]] = []

    def accept_to_outbox(self, peer: str, assigned: list) -> Deferred:
        d = Deferred()
        self.accepts.append((peer, [seq for seq, _ in assigned], d))
        return d


def message(n: int, dest: str = "router-b") -> Message:
    return Message(f"m{n}", "router-a", dest, "q", b"x")


def numbered(first: int, count: int, dest: str = "router-b") -> list:
    return [(seq, message(seq, dest)) for seq in range(first, first + count)]


class Accepts:
    "An EarlyAccepts for the link to router-b and everything it calls."

    def __init__(self, hold_s: float = HOLD_S) -> None:
        self.clock = Clock()
        self.store = AcceptingStore()
        self.pending = EarlyPending()
        self.acknowledged: list[Ack] = []
        self.failures: list[str] = []
        self.accepts = EarlyAccepts("router-b", self.store, self.clock, self.acknowledged.append,
                                    lambda failure, doing: self.failures.append(doing),
                                    self.pending, hold_s)

    def accept(self, assigned: list) -> list:
        "Accept C{assigned}; the list the outcome lands in."
        outcome = []
        self.accepts.accept(assigned).addBoth(outcome.append)
        return outcome


def test_an_acknowledgement_within_the_hold_makes_the_accept_moot():
    """
    The peer holds the sends before the hold ends: nothing is written,
    the senders are answered at once, and nothing counts them pending.
    """
    t = Accepts()
    outcome = t.accept(numbered(1, 3))
    assert t.pending.destinations("router-c") == {"router-b"}
    t.clock.advance(HOLD_S / 2)
    assert t.accepts.made_moot(Ack(3)) == {1, 2, 3}
    assert outcome == [None]
    assert not t.accepts.holds(Ack(3))
    t.clock.advance(HOLD_S)
    assert t.store.accepts == []
    assert t.pending.destinations("router-c") == set()


def test_the_accept_is_written_when_its_hold_ends():
    """
    No acknowledgement within the hold: the accept goes to the store, the
    senders are answered once it is durable, and an acknowledgement that
    arrives meanwhile is held until then.
    """
    t = Accepts()
    outcome = t.accept(numbered(1, 2))
    t.clock.advance(HOLD_S)
    [(peer, seqs, d)] = t.store.accepts
    assert (peer, seqs) == ("router-b", [1, 2])
    assert t.accepts.made_moot(Ack(2)) == set()
    assert t.accepts.holds(Ack(2))
    assert outcome == []
    d.callback(None)
    assert outcome == [None]
    t.clock.advance(0)
    assert t.acknowledged == [Ack(2)]
    assert t.pending.destinations("router-c") == set()


def test_an_acknowledgement_of_part_of_a_held_accept_writes_it_now():
    """
    The peer holds the first two of four (a batch that crossed in two
    frames): the accept is written whole at once, its senders answered
    once it is durable, and the Ack applies after that, so that no
    message is reported forwarded before accepted.
    """
    t = Accepts()
    outcome = t.accept(numbered(1, 4))
    assert t.accepts.made_moot(Ack(2)) == set()
    [(_, seqs, d)] = t.store.accepts
    assert seqs == [1, 2, 3, 4]
    assert t.accepts.holds(Ack(2))
    assert outcome == []
    d.callback(None)
    assert outcome == [None]
    t.clock.advance(0)
    assert t.acknowledged == [Ack(2)]
    t.clock.advance(HOLD_S)
    assert len(t.store.accepts) == 1


def test_an_acknowledgement_makes_every_held_accept_it_covers_moot_in_order():
    t = Accepts()
    first, second, third = t.accept(numbered(1, 1)), t.accept(numbered(2, 2)), t.accept(numbered(4, 1))
    assert len(t.accepts.made_moot(Ack(3))) == 3
    assert (first, second, third) == ([None], [None], [])
    t.clock.advance(HOLD_S)
    assert [seqs for _, seqs, _ in t.store.accepts] == [[4]]


def test_the_held_accepts_are_written_when_the_link_closes():
    """
    The link closed with accepts held: they are written at once, so that
    what is in flight stays in the outbox for the next recovery.
    """
    t = Accepts(hold_s=1.0)
    outcomes = t.accept(numbered(1, 2)), t.accept(numbered(3, 1))
    t.accepts.flush()
    assert [seqs for _, seqs, _ in t.store.accepts] == [[1, 2], [3]]
    for _, _, d in t.store.accepts:
        d.callback(None)
    assert outcomes == ([None], [None])
    t.clock.advance(2.0)
    assert len(t.store.accepts) == 2


def test_a_failed_accept_fails_its_senders_and_closes_the_link():
    t = Accepts()
    outcome = t.accept(numbered(1, 1))
    t.clock.advance(HOLD_S)
    t.store.accepts[0][2].errback(Failure(OSError("disk I/O error")))
    assert isinstance(outcome[0], Failure)
    outcome[0].trap(OSError)
    assert t.failures == ["accepting messages into the outbox"]
    assert t.pending.destinations("router-c") == set()


def test_no_hold_writes_at_once():
    t = Accepts(hold_s=0)
    t.accept(numbered(1, 1))
    assert [seqs for _, seqs, _ in t.store.accepts] == [[1]]
    assert t.accepts.made_moot(Ack(1)) == set()
    assert t.accepts.holds(Ack(1))


def test_pending_counts_each_peer_and_destination():
    """
    What another link may not overtake: the destinations with early sends
    not in the store's outbox yet on a link to any other peer.
    """
    pending = EarlyPending()
    to_d = [message(1, "router-d"), message(2, "router-d")]
    pending.add("router-b", to_d)
    pending.add("router-c", [message(3, "router-e")])
    assert pending.destinations("router-b") == {"router-e"}
    assert pending.destinations("router-c") == {"router-d"}
    pending.remove("router-b", to_d[:1])
    assert pending.destinations("router-c") == {"router-d"}
    pending.remove("router-b", to_d[1:])
    assert pending.destinations("router-c") == set()
