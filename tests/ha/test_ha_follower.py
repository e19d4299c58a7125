"""
The backup's side of the replication connection: L{ReplicationFollower}
dialling through fake endpoints (L{StringTransport}, L{task.Clock}), the
test playing the active instance, with a replica whose work the test
completes when it wants.
"""

import os

import msgpack
import pytest
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.task import Clock
from twisted.logger import LogLevel, capturedLogs

from support.fakes import RecordingEngine
from meshroute.events import EventLog, read_events
from meshroute.ha.follower import MAX_WAITING_FRAMES, ReplicationFollower
from meshroute.ha.replica import ReplicaGap
from meshroute.harules.quorum import LogPosition
from meshroute.link import auth, reasons
from meshroute.link.context import RouterContext
from meshroute.link.registry import LinkRegistry
from meshroute.link.retry import RetrySchedule
from meshroute.link.rotation import EndpointRotation
from meshroute.link.settings import ConnectorSettings
from meshroute.store.changes import ChangeBatch
from meshroute.wire.frames import (
    Applied,
    Authenticate,
    Authenticated,
    Changes,
    Follow,
    InSync,
    Keepalive,
    Reject,
    ReplicaHello,
    SnapshotChunk,
    SnapshotEnd,
    Welcome,
)
from support.connector_testing import LISTENER_CHALLENGE, Attempt, FakeEndpoint
from support.small_disk import fill, small_disk

NAME = "router-b"
SECRET = b"mesh secret"
STORE_ID = "store-of-the-active"
KEEPALIVE_MS = 1000
RETRY_MS = 200


def wire(position: int, epoch: int = 1) -> list:
    """
    Batch C{position} as it comes in a Changes frame.
    """
    batch = ChangeBatch(epoch, position, (("INSERT INTO t VALUES (?1)", (position,)),))
    return msgpack.unpackb(msgpack.packb(batch.to_plain()))


class FakeReplica:
    """
    A replica that holds positions only; its work completes at once, or
    when the test fires it (C{hold}).
    """

    def __init__(self, position: LogPosition, store_id: str = STORE_ID) -> None:
        self.store_id = store_id
        self._position = position
        self.applied: list[list[int]] = []
        self.installed: list[bytes] = []
        self.hold = False
        self.held: list[Deferred] = []
        self.failure: Exception | None = None

    def position(self) -> LogPosition:
        return self._position

    def _done(self, position: LogPosition) -> Deferred:
        if self.failure is not None:
            return fail(self.failure)
        if not self.hold:
            self._position = position
            return succeed(position)
        d = Deferred()
        d.addCallback(lambda _: setattr(self, "_position", position) or position)
        self.held.append(d)
        return d

    def apply(self, batches) -> Deferred:
        assert batches[0].position == self._position.position + 1 or self.hold
        self.applied.append([b.position for b in batches])
        return self._done(LogPosition(batches[-1].epoch, batches[-1].position))

    def install_snapshot(self, path: str) -> Deferred:
        with open(path, "rb") as f:
            self.installed.append(f.read())
        os.unlink(path)  # moved into place
        return self._done(LogPosition(1, 2))

    def release(self) -> None:
        """
        Complete the work held so far (not what that hands it next).
        """
        held, self.held = self.held, []
        for d in held:
            d.callback(None)


class Harness:
    def __init__(self, tmp_path, replica: FakeReplica) -> None:
        self.clock = Clock()
        self.data_dir = str(tmp_path)
        self.data_dir = str(tmp_path)
        self.events = EventLog(self.data_dir, NAME, self.clock)
        self.context = RouterContext(name=NAME, clock=self.clock, events=self.events,
                                     registry=LinkRegistry(), engine=RecordingEngine())
        self.endpoint = FakeEndpoint(self.clock)
        self.replica = replica
        self.reports: list[str] = []
        settings = ConnectorSettings(secret=SECRET, expected_peer=NAME,
                                     stage_valid_timeout_ms=5000)
        self.follower = ReplicationFollower(
            self.context, settings, EndpointRotation([("tcp:peer", self.endpoint)]),
            RetrySchedule(RETRY_MS, 1.0, RETRY_MS, -1), self.clock, replica, self.data_dir,
            caught_up=lambda: self.reports.append("caught-up"),
            lost=lambda: self.reports.append("lost"),
            peer_heard=lambda: self.reports.append("heard"))
        self.follower.startService()

    @property
    def attempt(self) -> Attempt:
        return self.endpoint.last

    def reach_replication(self) -> list:
        """
        Play the active's side of the handshake; return what the follower
        sent once authenticated.
        """
        attempt = self.attempt
        attempt.connect()
        assert attempt.sent() == [ReplicaHello([3], NAME)]
        attempt.write(Welcome(3, NAME, KEEPALIVE_MS, LISTENER_CHALLENGE))
        [authenticate] = attempt.sent()
        assert isinstance(authenticate, Authenticate)
        attempt.write(Authenticated(auth.proof(SECRET, "listener", NAME, NAME,
                                               authenticate.challenge, LISTENER_CHALLENGE)))
        assert attempt.protocol.link.core.stage == "replication"
        return attempt.sent()

    def closed(self) -> list[dict]:
        self.events.flush()
        return [r for r in read_events(self.data_dir) if r["event"] == "link.closed"]

    def heard(self) -> int:
        heard = self.reports.count("heard")
        self.reports[:] = [r for r in self.reports if r != "heard"]
        return heard

    def snapshots_in_data_dir(self) -> list[str]:
        return [n for n in os.listdir(self.follower.data_dir)
                if n.startswith("incoming-snapshot-")]


@pytest.fixture
def harness(tmp_path, request):
    made = Harness(tmp_path, FakeReplica(LogPosition(1, 3)))
    request.addfinalizer(made.events.close)
    request.addfinalizer(made.follower.stopService)
    return made


def test_it_follows_from_the_replica_s_position_applies_acknowledges_and_says_in_sync(harness):
    assert harness.reach_replication() == [Follow(STORE_ID, 1, 3)]
    attempt = harness.attempt
    attempt.write(Changes([wire(4), wire(5)], 6))
    assert harness.replica.applied == [[4, 5]]
    assert attempt.sent() == [Applied(5)]  # not yet at the head
    attempt.write(Changes([wire(6)], 6))
    assert attempt.sent() == [Applied(6), InSync(6)]
    assert harness.reports.count("caught-up") == 1
    attempt.write(Changes([wire(7)], 7))
    attempt.write(Keepalive())
    assert attempt.sent() == [Applied(7)]  # in sync once per connection
    assert harness.reports.count("caught-up") == 1
    assert harness.heard() == 4  # every frame from the active, keepalives too


def test_a_replica_already_at_the_head_says_in_sync_at_the_first_changes(harness):
    harness.reach_replication()
    harness.attempt.write(Changes([], 3))
    assert harness.attempt.sent() == [InSync(3)]
    assert harness.replica.applied == []


def test_acknowledgements_wait_for_the_replica_and_batches_apply_in_order(harness):
    harness.reach_replication()
    harness.replica.hold = True
    attempt = harness.attempt
    attempt.write(Changes([wire(4)], 5))
    attempt.write(Changes([wire(5)], 5))
    assert harness.replica.applied == [[4]]  # the second waits for the first
    assert attempt.sent() == []
    harness.replica.release()
    assert harness.replica.applied == [[4], [5]]
    assert attempt.sent() == [Applied(4)]
    harness.replica.release()
    assert attempt.sent() == [Applied(5), InSync(5)]


def test_a_snapshot_is_written_in_the_data_dir_installed_and_acknowledged(harness):
    harness.reach_replication()
    attempt = harness.attempt
    attempt.write(SnapshotChunk(b"SQLite "))
    attempt.write(SnapshotChunk(b"format 3"))
    assert len(harness.snapshots_in_data_dir()) == 1
    attempt.write(SnapshotEnd(1, 2))
    assert harness.replica.installed == [b"SQLite format 3"]
    assert attempt.sent() == [Applied(2)]
    attempt.write(Changes([wire(3)], 3))
    assert attempt.sent() == [Applied(3), InSync(3)]
    assert harness.snapshots_in_data_dir() == []


def test_a_connection_lost_in_a_snapshot_deletes_it_and_is_reported(harness):
    harness.reach_replication()
    harness.attempt.write(SnapshotChunk(b"SQLite "))
    harness.attempt.drop()
    assert harness.snapshots_in_data_dir() == []
    assert "lost" in harness.reports
    assert harness.replica.installed == []


@pytest.mark.parametrize("how", ["the connection drops", "the work before it fails"])
def test_a_whole_snapshot_whose_install_never_runs_is_deleted(harness, how):
    """
    The snapshot ended while the replica still applied batches sent
    before it; its install waits behind them, and never runs if the
    connection is gone, or one of them fails, by then.
    """
    harness.reach_replication()
    harness.replica.hold = True
    harness.attempt.write(Changes([wire(4)], 5))
    harness.attempt.write(SnapshotChunk(b"SQLite format 3"))
    harness.attempt.write(SnapshotEnd(1, 2))
    assert len(harness.snapshots_in_data_dir()) == 1
    if how == "the connection drops":
        harness.attempt.drop()
        harness.replica.release()
    else:
        [held] = harness.replica.held
        held.errback(ReplicaGap(3, 5))
        harness.attempt.drop()
    assert harness.snapshots_in_data_dir() == []
    assert harness.replica.installed == []


def test_a_snapshot_the_disk_refuses_is_deleted_at_once_and_said_once_until_one_is_taken(
        harness, tmp_path):
    """
    The backup's disk is full when the active sends a snapshot: each
    connection closes at its first chunk, leaving no partial file behind,
    and the log says so once; once there is room the next snapshot is
    written and installed, and that is said too.
    """
    with small_disk(tmp_path / "disk", "1m") as disk, capturedLogs() as logged:
        harness.follower.data_dir = str(disk)
        filler = fill(disk)
        for _ in range(3):
            harness.reach_replication()
            harness.attempt.write(SnapshotChunk(b"SQLite " * 10_000))
            harness.attempt.write(SnapshotChunk(b"format 3"))
            harness.attempt.write(SnapshotEnd(1, 2))
            assert harness.attempt.transport.disconnected
            assert harness.snapshots_in_data_dir() == []
            harness.attempt.drop()
            assert harness.closed()[-1]["reason"] == reasons.STORE_FAILED
            harness.clock.advance(RETRY_MS / 1000)
        said = [e for e in logged if e.get("log_namespace") == "meshroute.ha.follower"
                and e["log_level"] >= LogLevel.warn]
        assert len(said) == 1
        assert "cannot write the snapshot: No space left on device" in said[0]["why"]
        assert harness.replica.installed == []
        os.unlink(filler)
        harness.reach_replication()
        harness.attempt.write(SnapshotChunk(b"SQLite " * 10_000))
        harness.attempt.write(SnapshotEnd(1, 2))
        assert harness.attempt.sent() == [Applied(2)]
        assert harness.replica.installed == [b"SQLite " * 10_000]
        assert harness.snapshots_in_data_dir() == []
    assert "replication: the replica's disk has room again; following" in [
        e["log_format"] for e in logged]


def test_a_replica_failure_closes_the_connection_and_the_next_follows_from_its_position(
        harness):
    harness.reach_replication()
    harness.attempt.write(Changes([wire(4)], 4))
    harness.replica.failure = ReplicaGap(4, 6)
    harness.attempt.sent()
    harness.attempt.write(Changes([wire(6)], 6))
    assert harness.attempt.transport.disconnected
    harness.attempt.drop()
    assert harness.closed()[-1]["reason"] == reasons.STORE_FAILED
    harness.replica.failure = None
    harness.clock.advance(RETRY_MS / 1000)
    assert harness.reach_replication() == [Follow(STORE_ID, 1, 4)]


def test_the_next_connection_follows_once_the_replica_finished_the_last_one_s_work(harness):
    harness.reach_replication()
    harness.replica.hold = True
    harness.attempt.write(Changes([wire(4)], 4))
    harness.attempt.write(Changes([wire(5)], 5))
    harness.attempt.drop()
    harness.clock.advance(RETRY_MS / 1000)
    assert harness.reach_replication() == []  # the replica still applies batch 4
    harness.replica.release()
    # Batch 5 was dropped with its connection; the replica holds 4.
    assert harness.attempt.sent() == [Follow(STORE_ID, 1, 4)]
    assert harness.replica.applied == [[4]]


def test_a_slow_replica_stops_reading_the_connection(harness):
    harness.reach_replication()
    harness.replica.hold = True
    transport = harness.attempt.transport
    for position in range(4, 4 + MAX_WAITING_FRAMES):
        harness.attempt.write(Changes([wire(position)], 20))
    assert transport.producerState == "paused"
    harness.replica.release()
    assert transport.producerState == "producing"


@pytest.mark.parametrize("frames", [
    [SnapshotEnd(1, 2)],  # no snapshot to end
    [SnapshotChunk(b"x"), Changes([], 3)],  # changes inside a snapshot
])
def test_frames_out_of_the_stream_s_order_are_a_protocol_error(harness, frames):
    harness.reach_replication()
    for frame in frames:
        harness.attempt.write(frame)
    assert harness.attempt.transport.disconnected
    harness.attempt.drop()
    assert harness.closed()[-1]["reason"] == reasons.PROTOCOL_ERROR
    assert harness.snapshots_in_data_dir() == []


def test_an_instance_that_is_not_active_is_dialled_again(harness):
    attempt = harness.attempt
    attempt.connect()
    attempt.sent()
    attempt.write(Welcome(3, NAME, KEEPALIVE_MS, LISTENER_CHALLENGE))
    attempt.sent()
    attempt.write(Reject(reasons.NOT_ACTIVE, "this instance is not the active one"))
    attempt.drop()
    assert harness.reports == []  # it never followed: nothing lost
    harness.clock.advance(RETRY_MS / 1000)
    assert len(harness.endpoint.attempts) == 2


def test_the_active_s_large_frames_are_accepted(harness):
    """
    A transaction may be larger than any message frame: the follower's
    decoder takes the replication limit.
    """
    harness.reach_replication()
    big = ChangeBatch(1, 4, (("INSERT INTO t VALUES (?1)", (b"x" * (5 * 1024 * 1024),)),))
    harness.attempt.write(Changes([batch_plain(big)], 4))
    assert harness.attempt.sent() == [Applied(4), InSync(4)]


def batch_plain(batch: ChangeBatch) -> list:
    return msgpack.unpackb(msgpack.packb(batch.to_plain()))
