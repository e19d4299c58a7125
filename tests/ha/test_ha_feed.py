"""
The active instance's side of the replication connection: its
replication listener (vote and replication connections from the pair's
other instance) and the feed of one follower, over L{StringTransport}
with a L{task.Clock}; the test plays the follower, with a small source
and gate of its own.
"""

import os
from dataclasses import dataclass

import msgpack
import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.logger import LogLevel, capturedLogs

from meshroute import events
from meshroute.ha import feed as feed_module
from meshroute.ha.feed import ReplicationServer
from meshroute.ha.source import NoRoomForSnapshot
from meshroute.ha.listener import replication_listener
from meshroute.ha.pairing import Pairing
from meshroute.harules.quorum import LogPosition
from meshroute.link import auth, reasons, stages
from meshroute.link.registry import LinkRegistry
from meshroute.link.settings import ListenerSettings
from meshroute.store.changes import ChangeBatch
from meshroute.wire.codec import FrameDecoder, encode
from meshroute.wire.frames import (
    MAX_SNAPSHOT_CHUNK,
    Applied,
    Authenticate,
    Authenticated,
    Changes,
    Follow,
    Hello,
    InSync,
    Keepalive,
    Reject,
    ReplicaHello,
    SnapshotChunk,
    SnapshotEnd,
    StartAnswer,
    StartQuery,
    VoteHello,
    Welcome,
)
from meshroute.router.witness import Witness
from support.held_records import HeldRecords
from support.link_peer import REMOTE, router  # noqa: F401 (router: a fixture)

NAME = "router-b"
SECRET = b"mesh secret"
STORE_ID = "store-of-the-active"
KEEPALIVE_MS = 1000
CHALLENGE = bytes(range(32))


def batch(position: int, epoch: int = 1, size: int = 0) -> ChangeBatch:
    return ChangeBatch(epoch, position, (("INSERT INTO t VALUES (?1, ?2)",
                                          (position, b"x" * size)),))


def wire(position: int) -> list:
    """
    L{batch} as a follower decodes it from a Changes frame.
    """
    return msgpack.unpackb(msgpack.packb(batch(position).to_plain()))


class FakeSource:
    """
    A retained log (batches after C{base}), subscriptions, and snapshots
    the test completes (L{meshroute.ha.source.ReplicationSource}'s
    interface).
    """

    def __init__(self, batches=(), base: LogPosition = LogPosition(0, 0)) -> None:
        self.store_id = STORE_ID
        self.base = base
        self.log = list(batches)
        self.subscribers = []
        self.snapshots: list[Deferred] = []

    @property
    def head(self) -> LogPosition:
        last = self.log[-1] if self.log else None
        return LogPosition(last.epoch, last.position) if last else self.base

    def append(self, new: ChangeBatch) -> None:
        self.log.append(new)
        for subscriber in list(self.subscribers):
            subscriber(new)

    def since(self, epoch: int, position: int):
        if position < self.base.position or position > self.head.position:
            return None
        known = self.base if position == self.base.position else next(
            LogPosition(b.epoch, b.position) for b in self.log if b.position == position)
        if known.epoch != epoch:
            return None
        return [b for b in self.log if b.position > position]

    def subscribe(self, callback) -> None:
        self.subscribers.append(callback)

    def unsubscribe(self, callback) -> None:
        self.subscribers.remove(callback)

    def snapshot(self) -> Deferred:
        self.snapshots.append(Deferred())
        return self.snapshots[-1]


@dataclass(frozen=True)
class Snapshot:
    path: str
    epoch: int
    position: int


class FakeGate:
    def __init__(self) -> None:
        self.acknowledged_positions = []

    def acknowledged(self, position: int) -> None:
        self.acknowledged_positions.append(position)


class FillingTransport(StringTransport):
    """
    A transport whose buffer is full above C{limit} bytes not yet read
    by the test: it pauses its producer, as a TCP transport does.
    """

    limit: int | None = None

    def write(self, data: bytes) -> None:
        super().write(data)
        if (self.limit is not None and len(self.value()) > self.limit
                and self.producerState == "producing"):
            self.producerState = "paused"
            self.producer.pauseProducing()

    def drain(self) -> None:
        self.clear()
        if self.producerState == "paused":
            self.producerState = "producing"
            self.producer.resumeProducing()


class Instance:
    """
    The active instance's replication listener, and what its server
    reports.
    """

    def __init__(self, tmp_path) -> None:
        self.clock = Clock()
        self.tmp_path = tmp_path
        self.data_dir = str(tmp_path)
        self.events = events.EventLog(self.data_dir, NAME, self.clock)
        self.registry = LinkRegistry()
        self.witness = Witness(NAME, HeldRecords(), self.clock, self.events,
                               own_position=lambda: LogPosition(1, 3))
        self.witness.load()
        self.caught_up = 0
        self.heard = 0
        self.server = ReplicationServer(self._caught_up, self._heard)
        self.source = FakeSource([batch(1), batch(2), batch(3)])
        self.gate = FakeGate()
        settings = ListenerSettings(secret=SECRET, keepalive_interval_ms=KEEPALIVE_MS,
                                    stage_valid_timeout_ms=5000,
                                    reject_disconnect_delay_ms=1000)
        self.pairing = Pairing(NAME, NAME)
        self.factory = replication_listener(NAME, self.clock, self.events, self.registry,
                                            self.witness, self.server, settings, self.pairing)

    def _caught_up(self) -> None:
        self.caught_up += 1

    def _heard(self) -> None:
        self.heard += 1

    def connection(self) -> "Follower":
        return Follower(self, self.factory.buildProtocol(None))

    def snapshot_file(self, size: int) -> str:
        path = str(self.tmp_path / f"snapshot-{len(self.source.snapshots)}.db")
        with open(path, "wb") as f:
            f.write(bytes(i % 251 for i in range(size)))
        return path

    def recorded(self, event: str) -> list[dict]:
        self.events.flush()
        return [r for r in events.read_events(self.data_dir) if r["event"] == event]


class Follower:
    """
    The test plays the pair's other instance on one connection.
    """

    def __init__(self, instance: Instance, protocol) -> None:
        self.instance = instance
        self.protocol = protocol
        self.transport = FillingTransport()
        self._decoder = FrameDecoder()
        protocol.makeConnection(self.transport)

    @property
    def core(self):
        return self.protocol.link.core

    def send(self, *frames) -> None:
        self.protocol.dataReceived(b"".join(encode(f) for f in frames))

    def written(self) -> list:
        frames = self._decoder.feed(self.transport.value())
        self.transport.clear()
        return frames

    def authenticate(self, hello) -> None:
        self.send(hello)
        (welcome,) = self.written()
        assert isinstance(welcome, Welcome)
        self.welcome = welcome
        self.send(Authenticate(auth.proof(SECRET, "connector", NAME, NAME, CHALLENGE,
                                          welcome.challenge), CHALLENGE))

    def to_replication(self) -> None:
        self.authenticate(ReplicaHello([3], NAME, NAME))
        (authenticated,) = self.written()
        assert authenticated == Authenticated(auth.proof(SECRET, "listener", NAME, NAME,
                                                         CHALLENGE, self.welcome.challenge))
        assert self.core.stage == stages.REPLICATION

    def closed(self) -> dict:
        self.protocol.connectionLost(None)
        (record,) = [r for r in self.instance.recorded(events.LINK_CLOSED)
                     if r["link"] == self.core.link_id]
        return record


@pytest.fixture
def instance(tmp_path, request) -> Instance:
    made = Instance(tmp_path)
    request.addfinalizer(made.events.close)
    return made


@pytest.fixture
def active(instance) -> Instance:
    instance.server.serve(instance.source, instance.gate)
    return instance


# -- catching up from the log, then the live stream ----------------------------


def test_a_follower_the_log_covers_gets_the_batches_since_then_the_live_stream(active):
    follower = active.connection()
    follower.to_replication()
    assert active.registry.links() == []  # not a link
    follower.send(Follow(STORE_ID, 1, 1))
    assert follower.written() == [Changes([wire(2), wire(3)], 3)]
    active.source.append(batch(4))
    assert follower.written() == [Changes([wire(4)], 4)]
    follower.send(Applied(3), Applied(4))
    assert active.gate.acknowledged_positions == [3, 4]
    assert active.heard == 2
    follower.send(InSync(4), InSync(4))
    assert active.caught_up == 1  # once per connection
    assert follower.closed()["stage"] == "replication"
    assert active.source.subscribers == []


def test_a_follower_up_to_date_is_told_the_head(active):
    follower = active.connection()
    follower.to_replication()
    follower.send(Follow(STORE_ID, 1, 3))
    assert follower.written() == [Changes([], 3)]


def test_catching_up_fills_changes_frames_up_to_their_size(active, monkeypatch):
    monkeypatch.setattr(feed_module, "CHANGES_FRAME_SIZE", 320)
    active.source.log = [batch(p, size=100) for p in range(1, 6)]
    follower = active.connection()
    follower.to_replication()
    follower.send(Follow(STORE_ID, 0, 0))
    sent = follower.written()
    assert [[b[1] for b in frame.batches] for frame in sent] == [[1, 2], [3, 4], [5]]
    assert {frame.head for frame in sent} == {5}


# -- snapshots -----------------------------------------------------------------


@pytest.mark.parametrize("follow", [
    Follow("a-new-replica", 0, 0),  # another store
    Follow(STORE_ID, 2, 2),  # diverged: it holds batch 2 of epoch 2
    Follow(STORE_ID, 1, 7),  # ahead of the active
])
def test_a_follower_the_log_cannot_serve_gets_a_snapshot_then_the_log(active, follow):
    follower = active.connection()
    follower.to_replication()
    follower.send(follow)
    assert follower.written() == []
    assert len(active.source.snapshots) == 1
    path = active.snapshot_file(2 * MAX_SNAPSHOT_CHUNK + 100)
    active.source.snapshots[0].callback(Snapshot(path, 1, 2))
    sent = follower.written()
    assert [type(f) for f in sent] == [SnapshotChunk, SnapshotChunk, SnapshotChunk,
                                       SnapshotEnd, Changes]
    assert b"".join(f.data for f in sent[:3]) == bytes(
        i % 251 for i in range(2 * MAX_SNAPSHOT_CHUNK + 100))
    assert sent[3:] == [SnapshotEnd(1, 2), Changes([wire(3)], 3)]
    assert not os.path.exists(path)  # the feed owns the snapshot file
    active.source.append(batch(4))
    assert follower.written() == [Changes([wire(4)], 4)]


def test_a_snapshot_that_fails_closes_the_connection(active, observe_errors):
    follower = active.connection()
    follower.to_replication()
    follower.send(Follow("a-new-replica", 0, 0))
    active.source.snapshots[0].errback(OSError("disk full"))
    assert observe_errors.take(lambda e: "cannot take a snapshot" in e.get("log_format", ""))
    assert follower.transport.disconnected
    assert follower.closed()["reason"] == reasons.STORE_FAILED


def test_a_snapshot_with_no_room_on_the_disk_is_said_once_until_one_fits(active):
    """
    The backup asks again each heartbeat-interval: each connection closes,
    the active runs alone, and the log says why once, not at each attempt.
    """
    with capturedLogs() as logged:
        for attempt in range(3):
            follower = active.connection()
            follower.to_replication()
            follower.send(Follow("a-new-replica", 0, 0))
            active.source.snapshots[attempt].errback(
                NoRoomForSnapshot("/data", 5_000_000, 4_000_000, 67_108_864))
            assert follower.transport.disconnected
            assert follower.closed()["reason"] == reasons.STORE_FAILED
        said = [e for e in logged if e.get("log_namespace") == "meshroute.ha.feed"
                and e["log_level"] >= LogLevel.warn]
        assert len(said) == 1 and "does not fit in /data" in said[0]["why"]
        follower = active.connection()
        follower.to_replication()
        follower.send(Follow("a-new-replica", 0, 0))
        active.source.snapshots[3].callback(Snapshot(active.snapshot_file(10), 1, 2))
        assert SnapshotEnd(1, 2) in follower.written()
    assert "replication: a snapshot fits on the disk again" in [
        e["log_format"] for e in logged]


def test_a_snapshot_taken_after_the_connection_closed_is_deleted(active):
    follower = active.connection()
    follower.to_replication()
    follower.send(Follow("a-new-replica", 0, 0))
    follower.closed()
    path = active.snapshot_file(10)
    active.source.snapshots[0].callback(Snapshot(path, 1, 3))
    assert not os.path.exists(path)


def test_a_batch_too_large_for_a_frame_reaches_the_follower_in_a_snapshot(active, monkeypatch):
    monkeypatch.setattr(feed_module, "MAX_REPLICATION_FRAME_SIZE", 1000)
    follower = active.connection()
    follower.to_replication()
    follower.send(Follow(STORE_ID, 1, 3))
    follower.written()
    [subscriber] = active.source.subscribers
    active.source.append(batch(4, size=2000))
    assert follower.written() == []
    assert len(active.source.snapshots) == 1
    assert active.source.subscribers == []
    # A batch the source hands the unsubscribed feed (it calls a copy of
    # its subscribers) waits in the log.
    subscriber(batch(5))
    assert follower.written() == []


# -- flow control --------------------------------------------------------------


def test_a_full_transport_pauses_the_snapshot(active):
    follower = active.connection()
    follower.to_replication()
    follower.transport.limit = MAX_SNAPSHOT_CHUNK
    follower.send(Follow("a-new-replica", 0, 0))
    path = active.snapshot_file(3 * MAX_SNAPSHOT_CHUNK)
    active.source.snapshots[0].callback(Snapshot(path, 1, 3))
    chunks = []
    for _ in range(3):
        sent = follower.written()
        assert [type(f) for f in sent] == [SnapshotChunk]  # one, then paused
        chunks.extend(sent)
        follower.transport.drain()
    assert follower.written() == [SnapshotEnd(1, 3), Changes([], 3)]


def test_a_full_transport_stops_the_stream_and_resuming_catches_up_from_the_log(active):
    follower = active.connection()
    follower.to_replication()
    follower.send(Follow(STORE_ID, 1, 3))
    follower.written()
    follower.transport.limit = 0
    active.source.append(batch(4))
    assert active.source.subscribers == []  # it stopped reading the source
    active.source.append(batch(5))
    active.source.append(batch(6))
    assert follower.written() == [Changes([wire(4)], 4)]
    follower.transport.limit = None
    follower.transport.drain()
    assert follower.written() == [Changes([wire(5), wire(6)], 6)]
    active.source.append(batch(7))
    assert follower.written() == [Changes([wire(7)], 7)]


# -- liveness ------------------------------------------------------------------


def test_keepalives_count_as_hearing_the_follower_only_with_nothing_unacknowledged(active):
    follower = active.connection()
    follower.to_replication()
    follower.send(Follow(STORE_ID, 1, 3))
    follower.send(Keepalive())
    assert active.heard == 1
    active.source.append(batch(4))
    follower.send(Keepalive())
    assert active.heard == 1  # it sits on batch 4
    follower.send(Applied(4), Keepalive())
    assert active.heard == 3


def test_a_silent_follower_is_closed_by_the_keepalive(active):
    follower = active.connection()
    follower.to_replication()
    active.clock.pump([KEEPALIVE_MS / 1000] * 5)
    assert follower.transport.disconnected
    assert follower.closed()["reason"] == reasons.KEEPALIVE


# -- refusals and out-of-stage frames -------------------------------------------


def test_an_instance_that_is_not_active_refuses_replication_with_not_active(instance):
    follower = instance.connection()
    follower.authenticate(ReplicaHello([3], NAME, NAME))
    (reject,) = follower.written()
    assert reject.code == reasons.NOT_ACTIVE


def test_a_wrong_secret_is_refused_before_not_active_is_told(instance):
    follower = instance.connection()
    follower.send(ReplicaHello([3], NAME, NAME))
    (welcome,) = follower.written()
    follower.send(Authenticate(b"\0" * 32, CHALLENGE))
    (reject,) = follower.written()
    assert reject.code == reasons.AUTH_FAILED


def test_stopping_serving_closes_replication_connections(active):
    follower = active.connection()
    follower.to_replication()
    follower.send(Follow(STORE_ID, 1, 3))
    active.server.stop()
    assert follower.transport.disconnecting
    assert follower.closed()["reason"] == reasons.SHUTDOWN
    assert active.source.subscribers == []
    assert active.server.refusal()[0] == reasons.NOT_ACTIVE


@pytest.mark.parametrize("frame", [Applied(1), InSync(1)])
def test_acknowledging_before_following_is_a_protocol_error(active, frame):
    follower = active.connection()
    follower.to_replication()
    follower.send(frame)
    assert follower.closed()["reason"] == reasons.PROTOCOL_ERROR


def test_a_second_follow_is_a_protocol_error(active):
    follower = active.connection()
    follower.to_replication()
    follower.send(Follow(STORE_ID, 1, 3), Follow(STORE_ID, 1, 3))
    assert follower.closed()["reason"] == reasons.PROTOCOL_ERROR
    assert active.source.subscribers == []


@pytest.mark.parametrize("hello, code", [
    (Hello([2, 3], NAME), reasons.NOT_ALLOWED),  # no routing links here
    (ReplicaHello([3], "router-c"), reasons.NOT_ALLOWED),  # only the pair's other instance
    (VoteHello([3], "router-c"), reasons.NOT_ALLOWED),
    (ReplicaHello([2], NAME, NAME), reasons.VERSION),
])
def test_the_replication_listener_admits_only_the_pair_s_other_instance(instance, hello, code):
    follower = instance.connection()
    follower.send(hello)
    (reject,) = follower.written()
    assert isinstance(reject, Reject) and reject.code == code


@pytest.mark.parametrize("hello", [
    ReplicaHello([3], NAME, "router-b-typo"),
    VoteHello([3], NAME, "router-b-typo"),
    VoteHello([3], NAME),  # an older meshroute names no group
])
def test_the_replication_listener_refuses_an_instance_of_another_group(instance, hello):
    """
    A mistyped group-name: the pair's other instance proves it knows the
    mesh secret, and is refused as a group mismatch naming both groups;
    the instance holds the refusal (it does not activate meanwhile) until
    a connection of its own group is authenticated.
    """
    pairing = instance.pairing
    peer = instance.connection()
    peer.authenticate(hello)
    (reject,) = peer.written()
    assert isinstance(reject, Reject) and reject.code == reasons.GROUP_MISMATCH
    theirs = repr(hello.group) if hello.group else "no group"
    assert f"HA group {NAME!r}, yours in {theirs}" in reject.detail
    assert pairing.refusal.startswith(f"{reasons.GROUP_MISMATCH}: this instance of router ")
    assert f"HA group {NAME!r}, the other instance in {theirs}" in pairing.refusal
    mended = instance.connection()
    mended.authenticate(VoteHello([3], NAME, NAME))
    assert mended.core.stage == stages.VOTING
    assert pairing.refusal is None


def test_an_unproven_hello_of_another_group_refuses_nothing(instance):
    """
    The group is checked only once the proof is good: a stranger cannot
    keep an instance from activating.
    """
    peer = instance.connection()
    peer.send(ReplicaHello([3], NAME, "router-b-typo"))
    peer.send(Authenticate(b"\0" * 32, CHALLENGE))
    (_, reject) = peer.written()
    assert isinstance(reject, Reject) and reject.code == reasons.AUTH_FAILED
    assert instance.pairing.refusal is None


# -- votes on the replication listener --------------------------------------------


def test_the_peer_s_vote_connection_is_answered_by_the_instance_s_own_witness(instance):
    peer = instance.connection()
    peer.authenticate(VoteHello([3], NAME, NAME))
    (authenticated,) = peer.written()
    assert isinstance(authenticated, Authenticated)
    assert peer.core.stage == stages.VOTING
    peer.send(StartQuery(NAME))
    (answer,) = peer.written()
    assert answer == StartAnswer(NAME, NAME, "", 0, "", 0, 0, 0, 0, [1, 3])


def test_a_routing_listener_takes_no_replication_connections(router):  # noqa: F811
    """
    Replication is between a pair's instances, on their replication
    listeners: a router's routing listener refuses it as a router
    without vote connections refuses those.
    """
    peer = router.listener()
    peer.send(ReplicaHello([3], REMOTE))
    (reject,) = peer.expect(Reject)
    assert reject.code == reasons.VERSION


def test_a_pause_and_resume_between_batches_leaves_one_subscription(active):
    """
    The transport may fill up with something else than a batch (a
    keepalive, the head): resumed, the feed finds nothing to catch up and
    goes on streaming, each batch once.
    """
    follower = active.connection()
    follower.to_replication()
    follower.send(Follow(STORE_ID, 1, 3))
    follower.written()
    follower.transport.producerState = "paused"
    follower.protocol.pauseProducing()
    follower.transport.drain()
    assert len(active.source.subscribers) == 1
    active.source.append(batch(4))
    assert follower.written() == [Changes([wire(4)], 4)]
