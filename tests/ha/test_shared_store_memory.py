"""
The timer rules of a shared-store instance (L{meshroute.ha.shared_store})
on a L{task.Clock}, in the in-memory mesh: real instances, a real lock
file in a temporary shared data dir, inline store executors.  Where a
test needs "the other instance" to do something a process would (hold
the lock and freeze, die), it holds the lock file itself.
"""

import dataclasses

import pytest

from meshroute.events import read_events
from meshroute.ha.shared_store import LOCK_LOST, SharedStoreInstance, instance_dir
from meshroute.ha.store_lock import StoreLock, StoreLockLost
from meshroute.harules import shared_store as rules
from meshroute.harules.settings import BACKUP, PRIMARY, SHARED_STORE, HASettings
from meshroute.sessions.settings import ClientListenerConfig
from meshroute.store import InlineExecutor
from meshroute.testing.memory_mesh import MemoryMesh
from support.ha_pair import _InlinePool
from support.store_testing import msg

ROUTER = "router-b"
POLL_MS, HEARTBEAT_MS, LEASE_MS = 100, 500, 3000


class SharedPair:
    def __init__(self, tmp_path) -> None:
        self.mesh = MemoryMesh(tmp_path)
        self.clock = self.mesh.clock
        self.clock.getThreadPool = _InlinePool
        self.clock.callFromThread = lambda f, *a, **kw: f(*a, **kw)
        self.data_dir = tmp_path / "shared"
        self.data_dir.mkdir()
        self.instances: list[SharedStoreInstance] = []
        self.stopped: list[str] = []

    def start(self, ha_role: str, **ha_options) -> SharedStoreInstance:
        base = self.mesh.config(ROUTER)
        config = dataclasses.replace(
            base, path=f"(memory)/{ha_role}.toml", data_dir=str(self.data_dir),
            listener=dataclasses.replace(base.listener, endpoint=f"{ROUTER}-{ha_role}"),
            clients=ClientListenerConfig((f"clients-{ha_role}",)),
            ha=HASettings(role=ha_role, group_name=ROUTER, policy=SHARED_STORE,
                          heartbeat_interval_ms=HEARTBEAT_MS, lease_timeout_ms=LEASE_MS,
                          lock_poll_interval_ms=POLL_MS, **ha_options))
        instance = SharedStoreInstance(
            config, self.clock, self.mesh.network.endpoints(ha_role),
            lambda: self.stopped.append(ha_role),
            executor_factory=lambda guard: InlineExecutor(guard=guard))
        instance.privilegedStartService()
        instance.startService()
        self.instances.append(instance)
        self.mesh.network.flush()
        return instance

    def stop(self, instance: SharedStoreInstance) -> None:
        stopped = instance.stopService()
        self.mesh.run(1.0)
        assert stopped.called
        self.instances.remove(instance)

    def run_until(self, predicate, limit: float, step: float = 0.01) -> float:
        """
        Run the mesh until C{predicate()}; return how long it took.
        """
        start = self.clock.seconds()
        while not predicate():
            assert self.clock.seconds() - start <= limit, f"not within {limit} s"
            self.mesh.run(step)
        return self.clock.seconds() - start


@pytest.fixture
def pair(tmp_path):
    pair = SharedPair(tmp_path)
    yield pair
    for instance in list(pair.instances):
        pair.stop(instance)
    pair.mesh.stop_all()


def state(instance) -> str:
    return instance.ha_status().state


def serving(instance) -> bool:
    return instance.router is not None and instance.router.describe()["serving"]


def test_the_first_instance_serves_and_the_second_waits(pair):
    primary = pair.start(PRIMARY)
    assert state(primary) == rules.ACTIVE and serving(primary)
    backup = pair.start(BACKUP)
    pair.mesh.run(1.0)
    status = backup.ha_status()
    assert (status.state, status.epoch, status.live.held, status.live.owner) == (
        rules.BACKUP_WAITING, 1, True, PRIMARY)
    assert backup.router is None and primary.ha_status().epoch == 1


def test_a_released_lock_is_taken_within_a_poll_in_the_next_epoch(pair):
    """
    The live dies (its lock goes with its process): the backup serves
    within lock-poll-interval, in an epoch above the dead live's.
    """
    live = StoreLock(str(pair.data_dir))
    assert live.try_live()
    live.write(rules.LockRecord(rules.LIVE, PRIMARY, 6, 40))
    backup = pair.start(BACKUP)
    pair.mesh.run(1.0)
    assert state(backup) == rules.BACKUP_WAITING
    live.close()
    took = pair.run_until(lambda: serving(backup), POLL_MS / 1000 + 0.05)
    assert took <= POLL_MS / 1000 + 0.01
    assert backup.ha_status().epoch == 7
    assert StoreLock(str(pair.data_dir)).read().epoch == 7


def test_a_silent_live_is_unresponsive_after_a_lease_and_keeps_the_store(pair):
    """
    A live that holds the lock but writes no heartbeat (frozen) is
    reported after lease-timeout, never replaced; when it writes again
    the backup waits quietly again.
    """
    frozen = StoreLock(str(pair.data_dir))
    frozen.try_live()
    frozen.write(rules.LockRecord(rules.LIVE, PRIMARY, 3, 10))
    backup = pair.start(BACKUP)
    took = pair.run_until(lambda: state(backup) == rules.LIVE_UNRESPONSIVE, 5.0)
    assert LEASE_MS / 1000 <= took <= LEASE_MS / 1000 + POLL_MS / 1000 + 0.01
    pair.mesh.run(30.0)
    assert state(backup) == rules.LIVE_UNRESPONSIVE and backup.router is None
    frozen.write(rules.LockRecord(rules.LIVE, PRIMARY, 3, 11))
    pair.run_until(lambda: state(backup) == rules.BACKUP_WAITING, POLL_MS / 1000 + 0.01)
    frozen.close()


def test_failback_within_a_heartbeat_and_restart_backup(pair):
    """
    The backup serves; the primary starts, asks for the store back, and
    the backup hands it over at its next heartbeat, then waits again.
    """
    backup = pair.start(BACKUP)
    assert serving(backup)
    primary = pair.start(PRIMARY)
    pair.mesh.run(0.01)
    assert state(primary) == rules.BACKUP_WAITING and primary.ha_status().failback_requested
    took = pair.run_until(lambda: serving(primary), HEARTBEAT_MS / 1000 + POLL_MS / 1000 + 0.05)
    assert took <= HEARTBEAT_MS / 1000 + POLL_MS / 1000 + 0.02
    assert (primary.ha_status().epoch, state(backup)) == (2, rules.BACKUP_WAITING)
    assert not primary.ha_status().failback_requested and pair.stopped == []


def test_without_restart_backup_the_backup_ends_its_process_after_handing_back(pair):
    backup = pair.start(BACKUP, restart_backup=False)
    pair.start(PRIMARY)
    pair.mesh.run(1.0)
    assert pair.stopped == [BACKUP] and backup.router is None


def test_without_allow_failback_the_primary_waits(pair):
    backup = pair.start(BACKUP, allow_failback=False)
    primary = pair.start(PRIMARY)
    pair.mesh.run(5.0)
    assert serving(backup) and state(primary) == rules.BACKUP_WAITING


def test_a_paused_store_waits_for_the_primary(pair):
    """
    A live stopped cleanly with failover-on-shutdown = false leaves the
    store paused: the backup does not take it, the primary does.
    """
    primary = pair.start(PRIMARY, failover_on_shutdown=False)
    backup = pair.start(BACKUP)
    pair.stop(primary)
    pair.mesh.run(2.0)
    assert state(backup) == rules.BACKUP_WAITING and backup.router is None
    assert not backup.ha_status().live.held
    primary = pair.start(PRIMARY)
    assert serving(primary) and primary.ha_status().epoch == 2


def test_a_replaced_lock_file_stops_the_live_at_its_next_heartbeat(pair, tmp_path,
                                                                   observe_errors):
    """
    The lock file is moved away under the live: its commit batches fail
    at once, and at its next heartbeat it stops serving (handing back,
    reason lock-lost), then takes the lock of the file now at the path,
    in a new epoch (store.db's epoch start outlives the lock file).
    """
    primary = pair.start(PRIMARY)
    (pair.data_dir / rules.LOCK_FILE).rename(tmp_path / "old.lock")
    with pytest.raises(StoreLockLost, match="removed or replaced"):
        primary.lock.held()
    refused = primary.router.store.accept(msg(1))
    assert refused.called and isinstance(refused.result.value, StoreLockLost)
    refused.addErrback(lambda _: None)
    first = primary.router
    pair.run_until(lambda: primary.router is not first and serving(primary),
                   HEARTBEAT_MS / 1000 + 0.05)
    assert primary.ha_status().epoch == 2
    # It said why it stopped serving; what its store could not commit
    # meanwhile (the pruner's work) was logged as failed.
    said = [e for e in observe_errors.errors if "it stops serving" in e.get("log_format", "")]
    lost = [e for e in observe_errors.errors
            if e.get("log_failure") and e["log_failure"].check(StoreLockLost)]
    assert said and lost
    observe_errors.errors[:] = [e for e in observe_errors.errors if e not in said + lost]
    reasons = [e["reason"] for e in read_events(instance_dir(primary.config))
               if e["event"] == "ha.state"]
    assert LOCK_LOST in reasons
