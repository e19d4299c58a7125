"""
The backup instance's side of the replication connection: it follows the
active instance's store into its own replica.

L{ReplicationFollower} keeps one replication connection up to the
peer's replication listener, as a routing connector keeps a link (the
same service, endpoint rotation and retry schedule), through the link
handshake's connector side with L{frames.ReplicaHello}.  Once
authenticated, each connection's L{FollowerStream}:

  - says where the replica stands (L{frames.Follow}: its store id and
    last batch);
  - writes the active's snapshot, if it sends one, chunk by chunk to a
    temporary file in the data dir, and installs it at
    L{frames.SnapshotEnd} (L{meshroute.ha.replica.Replica.install_snapshot});
  - applies each L{frames.Changes} in order, and answers
    L{frames.Applied} once applied (fsynced with C{replica-sync =
    "full"}: the replica's Deferred says when);
  - says L{frames.InSync} once (per connection) its position reaches the
    head the active last told it, and reports C{caught_up};
  - counts every frame from the active (its stream and its keepalives) as
    hearing it (C{peer_heard}: the role's lease-timeout for a backup);
  - reports C{lost} when the connection is gone.

The replica's work is one chain across connections: a new connection's
Follow waits until what the last one handed the replica is done, so it
names the position the replica will really hold.  A replica that fails
(a gap, a disk error) closes the connection (C{store-failed}); the next
one starts again from the replica's position.  When the replica falls
behind, the stream stops reading the connection (the active then stops
sending, as its transport's buffer fills).
"""

import contextlib
import errno
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from automat import TypeMachineBuilder
from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from meshroute.errors import StoreFull
from meshroute.link.connector import ConnectorService
from meshroute.link.context import RouterContext
from meshroute.link.retry import RetrySchedule
from meshroute.link.rotation import EndpointRotation
from meshroute.link.settings import ConnectorSettings
from meshroute.link.stages import REPLICA
from meshroute.said_once import SaidOnce
from meshroute.store.changes import ChangeBatch
from meshroute.wire.frames import Applied, Changes, Follow, InSync, SnapshotChunk, SnapshotEnd

log = Logger()

#: How many frames may wait for the replica before the stream stops
#: reading the connection (a Changes frame is about 1 MiB at most, see
#: L{meshroute.wire.codec.CHANGES_FRAME_SIZE}).
MAX_WAITING_FRAMES = 8

#: How the temporary file of a snapshot being received is named (in the
#: data dir); one an earlier run left is deleted at start
#: (L{meshroute.ha.store_replication.StoreReplication.remove_left_snapshots}).
INCOMING_SNAPSHOT_PREFIX = "incoming-snapshot-"


class StreamInputs(Protocol):
    """
    What the active sends one follower's stream, and its end.
    """

    def snapshot_chunk(self, frame: SnapshotChunk) -> None:
        "The next piece of a snapshot."

    def snapshot_end(self, frame: SnapshotEnd) -> None:
        "The snapshot is complete."

    def changes(self, frame: Changes) -> None:
        "Committed batches, and the active's head."

    def closed(self) -> None:
        "The connection is gone."


@dataclass
class StreamCore:
    """
    The data of one connection's stream and the work it hands the
    replica.

    @ivar snapshot_path: the temporary file a snapshot being received is
        written to.
    @ivar waiting: frames handed to the replica's chain and not done.
    """

    follower: "ReplicationFollower"
    send: Callable[[object], None]
    fail: Callable[[str], None]
    transport: object
    peer: str
    snapshot_path: str | None = None
    snapshot_file: object = None
    waiting: int = 0
    in_sync: bool = False
    ended: bool = False
    failed: bool = False

    def then(self, step: Callable[[], Deferred | None],
             skipped: Callable[[], None] | None = None) -> None:
        """
        Run C{step} on the replica after everything handed to it before
        (by this connection or an earlier one), unless this connection
        is gone or failed by then (C{skipped()} instead); a failure
        closes the connection.
        """
        self.waiting += 1
        if self.waiting == MAX_WAITING_FRAMES:
            self.transport.pauseProducing()

        def run(_):
            if self.ended or self.failed:
                if skipped is not None:
                    skipped()
                return None
            return step()

        def done(_) -> None:
            self.waiting -= 1
            if self.waiting == MAX_WAITING_FRAMES - 1 and not self.ended:
                self.transport.resumeProducing()

        self.follower.chain(run, self.replica_failed, done)

    def replica_failed(self, failure: Failure) -> None:
        """
        The replica failed a step, or the snapshot's file a write: the
        connection closes (once), and the next starts again from the
        replica's position.
        """
        if not self.failed and not self.ended:
            self.failed = True
            self.follower.replica_failed(failure, self.peer)
            self.fail(f"replica: {failure.getErrorMessage()}")

    def follow(self) -> None:
        position = self.follower.replica.position()
        self.send(Follow(self.follower.replica.store_id, position.epoch, position.position))

    def write_chunk(self, frame: SnapshotChunk) -> None:
        """
        Write a piece of the snapshot to its temporary file, made at the
        first.  A disk that refuses it fails the connection as a replica
        that cannot write does, and the partial file goes at once: kept,
        it would hold the space the next attempt needs.
        """
        if self.failed:
            return
        try:
            if self.snapshot_file is None:
                descriptor, self.snapshot_path = tempfile.mkstemp(
                    prefix=INCOMING_SNAPSHOT_PREFIX, suffix=".db", dir=self.follower.data_dir)
                self.snapshot_file = os.fdopen(descriptor, "wb")
            self.snapshot_file.write(frame.data)
        except OSError as error:
            self.snapshot_not_written(error)

    def snapshot_not_written(self, error: OSError) -> None:
        """
        The disk refused the snapshot: a full one is a L{StoreFull}, as
        for the replica's commits (said once until it has room).
        """
        self.drop_snapshot()
        why = f"cannot write the snapshot: {error.strerror or error}"
        self.replica_failed(Failure(
            StoreFull(why) if error.errno in (errno.ENOSPC, errno.EDQUOT) else OSError(why)))

    def drop_snapshot(self) -> None:
        """
        Delete the snapshot being received.  Its file's last buffered
        bytes may not fit on the disk: that is no matter, as it goes.
        """
        snapshot_file, path = self.snapshot_file, self.snapshot_path
        self.snapshot_file = self.snapshot_path = None
        if snapshot_file is not None:
            with contextlib.suppress(OSError):
                snapshot_file.close()
        if path is not None:
            _delete(path)

    def install(self, frame: SnapshotEnd) -> None:
        """
        The snapshot is whole: install it once the replica is done with
        what came before, then acknowledge its position.  (Not after a
        failed write: the connection is closing.)
        """
        if self.failed:
            return
        try:
            self.snapshot_file.close()
        except OSError as error:
            self.snapshot_not_written(error)
            return
        path, self.snapshot_file, self.snapshot_path = self.snapshot_path, None, None
        log.info("replication from {peer}: installing the snapshot at ({epoch}, {position})",
                 peer=self.peer, epoch=frame.epoch, position=frame.position)

        def install() -> Deferred:
            d = self.follower.replica.install_snapshot(path)
            d.addCallback(self._installed)
            d.addErrback(self._not_installed, path)
            return d

        # Skipped (the connection ended, or a step before failed), the
        # whole snapshot would stay on the disk.
        self.then(install, skipped=lambda: _delete(path))

    def _installed(self, position) -> None:
        self.follower.replica_written()
        self.send(Applied(position.position))

    @staticmethod
    def _not_installed(failure, path: str):
        _delete(path)
        return failure

    def apply(self, frame: Changes) -> None:
        """
        Apply the batches once the replica is done with what came before,
        acknowledge them, and say once when the replica reached the head.
        """
        batches = [ChangeBatch.from_plain(plain) for plain in frame.batches]

        def apply() -> Deferred:
            d = self.follower.replica.apply(batches) if batches else succeed(
                self.follower.replica.position())
            d.addCallback(self._applied, bool(batches), frame.head)
            return d

        self.then(apply)

    def _applied(self, position, acknowledge: bool, head: int) -> None:
        if acknowledge:
            self.follower.replica_written()
            self.send(Applied(position.position))
        if not self.in_sync and position.position >= head:
            self.in_sync = True
            self.send(InSync(position.position))
            log.info("replication from {peer}: in sync at ({epoch}, {position})",
                     peer=self.peer, epoch=position.epoch, position=position.position)
            self.follower.caught_up()

    def end(self) -> None:
        """
        The connection is gone: what it handed the replica and has not
        started is dropped, a partial snapshot deleted.
        """
        self.ended = True
        self.drop_snapshot()
        self.follower.lost()


def _delete(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _build_stream_machine():
    builder = TypeMachineBuilder(StreamInputs, StreamCore)
    streaming = builder.state("streaming")
    receiving_snapshot = builder.state("receiving_snapshot")
    ended = builder.state("ended")

    @streaming.upon(StreamInputs.snapshot_chunk).to(receiving_snapshot)
    @receiving_snapshot.upon(StreamInputs.snapshot_chunk).loop()
    def chunk(inputs: StreamInputs, core: StreamCore, frame: SnapshotChunk) -> None:
        core.write_chunk(frame)

    @receiving_snapshot.upon(StreamInputs.snapshot_end).to(streaming)
    def snapshot_end(inputs: StreamInputs, core: StreamCore, frame: SnapshotEnd) -> None:
        core.install(frame)

    @streaming.upon(StreamInputs.changes).loop()
    def changes(inputs: StreamInputs, core: StreamCore, frame: Changes) -> None:
        core.apply(frame)

    @streaming.upon(StreamInputs.closed).to(ended)
    @receiving_snapshot.upon(StreamInputs.closed).to(ended)
    def closed(inputs: StreamInputs, core: StreamCore) -> None:
        core.end()

    return builder.build()


_STREAM_MACHINE = _build_stream_machine()


class FollowerStream:
    """
    One replication connection, on the follower: the channel of its link
    in the replication stage (L{meshroute.link.core.LinkCore.channel}).
    A snapshot's end without its chunks, or changes in the middle of a
    snapshot, are out of stage (C{NoTransition}: a protocol error).
    """

    def __init__(self, core: StreamCore) -> None:
        self._core = core
        self._machine = _STREAM_MACHINE(core)

    def snapshot_chunk(self, frame: SnapshotChunk) -> None:
        self._core.follower.peer_heard()
        self._machine.snapshot_chunk(frame)

    def snapshot_end(self, frame: SnapshotEnd) -> None:
        self._core.follower.peer_heard()
        self._machine.snapshot_end(frame)

    def changes(self, frame: Changes) -> None:
        self._core.follower.peer_heard()
        self._machine.changes(frame)

    def keepalive(self) -> None:
        self._core.follower.peer_heard()

    def pause(self) -> None:
        "The follower sends little (acknowledgements): nothing to hold."

    def resume(self) -> None:
        "See L{pause}."

    def closed(self) -> None:
        self._machine.closed()


class ReplicationFollower(ConnectorService):
    """
    The backup's replication connection to the active instance, dialled
    again whenever it closes.

    @ivar replica: what the stream applies to: C{store_id}, C{position()}
        (a L{meshroute.harules.quorum.LogPosition}), C{apply(batches)} and
        C{install_snapshot(path)}, each a Deferred firing with the new
        position (a L{meshroute.ha.replica.Replica}).
    """

    #: What its connections are for (L{meshroute.link.link.LinkProtocol}).
    purpose = REPLICA

    def __init__(self, context: RouterContext, settings: ConnectorSettings,
                 endpoints: EndpointRotation, schedule: RetrySchedule, clock: IReactorTime,
                 replica, data_dir: str, caught_up: Callable[[], None],
                 lost: Callable[[], None], peer_heard: Callable[[], None]) -> None:
        """
        @param settings: the secret, the pair's router name
            (C{expected_peer}: the instances share it) and
            C{stage_valid_timeout_ms}.
        @param data_dir: where a snapshot being received is written.
        @param caught_up: called when a connection's stream reached the
            active's head (the role's C{caught_up}).
        @param lost: called when a connection that reached replication is
            gone.
        @param peer_heard: called on every frame from the active (the
            role's C{peer_heard}).
        """
        super().__init__(context, settings, endpoints, schedule, clock, side=self)
        self.setName(f"follower:{settings.expected_peer}")
        self.replica = replica
        self.data_dir = data_dir
        self.caught_up = caught_up
        self.lost = lost
        self.peer_heard = peer_heard
        self._work: Deferred = succeed(None)
        #: The replica failed for a full disk since it last wrote.
        self._full = SaidOnce(log)

    def following(self, core, fail: Callable[[str], None]) -> FollowerStream:
        """
        The channel of link C{core}, now authenticated: it asks to follow
        once the replica's earlier work is done.
        """
        stream = StreamCore(self, core.send_while_open, fail, core.transport, core.peer)
        stream.then(lambda: stream.follow())
        return FollowerStream(stream)

    def replica_failed(self, failure, peer: str) -> None:
        """
        The replica failed a step, and the connection closes.  A full disk
        is said once until the replica writes again: meanwhile each
        connection (one each heartbeat-interval) fails the same way.
        """
        if not failure.check(StoreFull):
            log.warn("replication from {peer}: the replica failed: {why}", peer=peer,
                     why=failure.getErrorMessage())
        else:
            self._full.trouble("replication from {peer}: the replica failed: {why}; following "
                               "again each heartbeat-interval until it has room (the active "
                               "runs alone meanwhile)", peer=peer, why=failure.getErrorMessage())

    def replica_written(self) -> None:
        """
        The replica wrote the batches, or installed the snapshot, it was
        sent.
        """
        self._full.over("replication: the replica's disk has room again; following")

    def chain(self, run, failed, done) -> None:
        """
        Add a step to the replica's one chain of work.
        """
        self._work.addCallback(run).addErrback(failed).addBoth(done)
