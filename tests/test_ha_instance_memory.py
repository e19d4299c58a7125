"""
Two L{HAInstance}s of router-b and a witness router in the in-memory
mesh, on one clock: start-up, the active's death, a graceful stop, and a
backup cut off from everyone.

The voters are real (each instance's own L{Witness} over its own
records, the witness router's L{Witness}); here they are asked directly,
through a relay that delays each question and answer and drops what
crosses a cut, instead of over vote connections.  Replication is
L{FakeReplication}: the follower is in sync at the first exchange and
hears the active each heartbeat-interval while neither is cut off.
"""

import dataclasses
import os

import pytest
from automat import NoTransition  # noqa: F401 (documents what a stray input raises)
from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import LoopingCall

from memory_mesh import SECRET, MemoryMesh
from meshroute.ha import quorum, role
from meshroute.ha.instance import HAInstance, instance_name
from meshroute.ha.records import HA_DB, HARecords
from meshroute.ha.settings import BACKUP, PRIMARY, HASettings, ReplicationSettings, WitnessSettings
from meshroute.ha.voters import Voters, asking_witness
from meshroute.store.executor import InlineExecutor

ROUTER = "router-b"
WITNESS = "router-a"
HEARTBEAT_MS = 500
LEASE_MS = 3000
LATENCY = 0.002
#: The issue's bound for a crash: lease-timeout + 2 × heartbeat-interval + 1 s.
FAILOVER_BOUND = (LEASE_MS + 2 * HEARTBEAT_MS) / 1000 + 1.0


class Reach:
    """
    Who can reach whom: a cut-off party sends and receives nothing.
    """

    def __init__(self, clock) -> None:
        self.clock = clock
        self.cut: set[str] = set()

    def can(self, a: str, b: str) -> bool:
        return a not in self.cut and b not in self.cut

    def relay(self, asker: str, target: str, ask):
        """
        C{ask} as C{asker} reaches it: after a delay each way, and never
        across a cut.
        """

        def relayed(question) -> Deferred:
            answered = Deferred()

            def arrive() -> None:
                if self.can(asker, target):
                    ask(question).addCallback(
                        lambda answer: self.clock.callLater(LATENCY, back, answer))

            def back(answer) -> None:
                if self.can(asker, target):
                    answered.callback(answer)

            self.clock.callLater(LATENCY, arrive)
            return answered

        return relayed


class FakeReplication:
    """
    One instance's replication side: positions as (epoch, 0), the follower
    in sync with a replicated active at the first exchange.
    """

    def __init__(self, pair: "Pair", key: str) -> None:
        self.pair = pair
        self.key = key
        self.held = quorum.ORIGIN
        self.epoch = 0
        self.mode = None
        self.leading = None
        self.following = None
        self.in_sync = False
        self.acknowledged = quorum.ORIGIN
        self.executors = []

    def open_replica(self):
        return succeed(None)

    def close_replica(self):
        return succeed(None)

    def position(self):
        return self.held

    def confirmed(self):
        return self.held if self.mode == "alone" else min(self.held, self.acknowledged)

    def lag(self):
        return None

    def executor(self):
        self.executors.append(InlineExecutor())
        return self.executors[-1]

    def serve_in(self, epoch: int) -> None:
        self.epoch = epoch
        self.held = quorum.LogPosition(epoch, 0)

    def confirm(self, alone: bool) -> None:
        self.mode = "alone" if alone else "replicated"

    def hold(self) -> None:
        self.mode = "held"

    def lead(self, caught_up, heard) -> None:
        self.leading = (caught_up, heard)

    def stop_leading(self) -> None:
        self.leading = None
        self.mode = None

    def follow(self, caught_up, heard) -> None:
        self.following = (caught_up, heard)
        self.in_sync = False

    def stop_following(self):
        self.following = None
        return succeed(None)

    def exchange(self, leader: "FakeReplication") -> None:
        """
        One round of replication traffic from C{leader}, if both are
        reachable.
        """
        if self.following is None or leader.leading is None:
            return
        if not self.pair.reach.can(self.key, leader.key):
            return
        caught_up, heard = self.following
        peer_caught_up, peer_heard = leader.leading
        if leader.mode == "replicated":
            self.held = leader.acknowledged = leader.held
        heard()
        peer_heard()
        if not self.in_sync:
            self.in_sync = True
            caught_up()
            peer_caught_up()


class Pair:
    """
    router-b's two instances and the witness router router-a.
    """

    def __init__(self, mesh: MemoryMesh, tmp_path, **ha_options) -> None:
        self.mesh = mesh
        self.clock = mesh.clock
        self.reach = Reach(self.clock)
        self.witness_router = mesh.add(WITNESS)
        self.tmp_path = tmp_path
        self.ha_options = ha_options
        self.instances: dict[str, HAInstance] = {}
        self.replication: dict[str, FakeReplication] = {}
        self._traffic = LoopingCall(self._exchange)
        self._traffic.clock = self.clock
        self._traffic.start(HEARTBEAT_MS / 1000)

    def key(self, ha_role: str) -> str:
        return instance_name(ROUTER, ha_role)

    def settings(self, ha_role: str) -> HASettings:
        other = BACKUP if ha_role == PRIMARY else PRIMARY
        return HASettings(
            role=ha_role, group_name=ROUTER,
            replication=ReplicationSettings(f"repl-{ha_role}", f"repl-{other}", "(memory)",
                                            SECRET),
            witnesses=(WitnessSettings(WITNESS, WITNESS),),
            heartbeat_interval_ms=HEARTBEAT_MS, lease_timeout_ms=LEASE_MS,
            **self.ha_options)

    def start(self, ha_role: str) -> HAInstance:
        key = self.key(ha_role)
        config = dataclasses.replace(
            self.mesh.config(ROUTER), path=f"(memory)/{key}.toml",
            data_dir=str(self.tmp_path / key.replace("/", "-")),
            listener=dataclasses.replace(self.mesh.config(ROUTER).listener, endpoint=key),
            ha=self.settings(ha_role))
        replication = self.replication[key] = FakeReplication(self, key)
        records = HARecords(os.path.join(config.data_dir, HA_DB), InlineExecutor())
        instance = HAInstance(config, self.clock, self.mesh.network.endpoints(key),
                              records, self._voters_for, lambda instance: replication)
        self.instances[key] = instance
        instance.startService()
        return instance

    def _voters_for(self, name: str, own) -> Voters:
        lease = LEASE_MS / 1000
        peer = self.key(BACKUP) if name == self.key(PRIMARY) else self.key(PRIMARY)

        def peer_voter(question):
            # Whatever instance runs under the peer's name now.
            return asking_witness(self.instances[peer], name, ROUTER, lease)(question)

        return Voters(self.clock, name, {
            name: asking_witness(own, name, ROUTER, lease),
            peer: self.reach.relay(name, peer, peer_voter),
            WITNESS: self.reach.relay(name, WITNESS, asking_witness(
                self.witness_router.witness, name, ROUTER, lease)),
        }, [])

    def _exchange(self) -> None:
        for follower in self.replication.values():
            for leader in self.replication.values():
                if leader is not follower and self.instances.get(leader.key) is not None:
                    follower.exchange(leader)

    def state(self, ha_role: str) -> str:
        return self.instances[self.key(ha_role)].role.state

    def states(self) -> dict[str, str]:
        return {key: instance.role.state for key, instance in self.instances.items()
                if instance.role is not None}

    def run_until(self, predicate, limit: float, step: float = 0.01) -> float:
        """
        Run the mesh until C{predicate()}; the clock time it took.
        """
        start = self.clock.seconds()
        while not predicate():
            assert self.clock.seconds() - start <= limit, (
                f"not within {limit} s: {self.states()}")
            self.mesh.run(step)
        return self.clock.seconds() - start

    def kill(self, ha_role: str) -> None:
        """
        The instance dies: cut off at once, its store left as it was.
        """
        key = self.key(ha_role)
        self.reach.cut.add(key)
        instance = self.instances.pop(key)
        self.replication.pop(key)
        stopped = instance.stopService()
        self.mesh.run(2.0)
        assert stopped.called

    def stop(self, ha_role: str) -> None:
        """
        SIGTERM: stop the instance (handing over first when it may).
        """
        key = self.key(ha_role)
        stopped = self.instances[key].stopService()
        self.run_until(lambda: stopped.called, 2.0)
        del self.instances[key]
        del self.replication[key]

    def shut(self) -> None:
        self._traffic.stop()
        for key in list(self.instances):
            self.reach.cut.add(key)
            stopped = self.instances.pop(key).stopService()
            self.mesh.run(2.0)
            assert stopped.called
        self.mesh.stop_all()


def serving(instance: HAInstance) -> bool:
    return instance.router is not None and instance.router.describe()["serving"]


@pytest.fixture
def pair(tmp_path):
    pair = Pair(MemoryMesh(tmp_path), tmp_path)
    yield pair
    pair.shut()


def start_both(pair: Pair) -> tuple[HAInstance, HAInstance]:
    primary = pair.start(PRIMARY)
    backup = pair.start(BACKUP)
    pair.run_until(lambda: pair.states() == {
        pair.key(PRIMARY): role.ACTIVE_REPLICATED, pair.key(BACKUP): role.BACKUP_IN_SYNC},
        10.0)
    # The backup holds the replicated epoch's start.
    pair.run_until(lambda: backup.replication.position() == primary.replication.position(),
                   1.0)
    return primary, backup


def test_at_start_up_the_primary_serves_and_the_backup_follows_in_sync(pair):
    primary, backup = start_both(pair)
    assert serving(primary)
    assert backup.router is None
    assert pair.replication[pair.key(PRIMARY)].mode == "replicated"
    # It stays so: the lease holds, the backup hears the active.
    pair.mesh.run(10.0)
    assert pair.states() == {pair.key(PRIMARY): role.ACTIVE_REPLICATED,
                             pair.key(BACKUP): role.BACKUP_IN_SYNC}
    status = primary.ha_status()
    assert (status.role, status.state, status.epoch) == (PRIMARY, role.ACTIVE_REPLICATED, 2)


def test_the_active_s_death_makes_the_backup_active_within_the_bound(pair):
    primary, backup = start_both(pair)
    pair.kill(PRIMARY)
    took = 2.0 + pair.run_until(lambda: serving(backup), FAILOVER_BOUND - 2.0)
    assert took <= FAILOVER_BOUND
    assert pair.state(BACKUP) == role.ACTIVE_ALONE
    assert pair.replication[pair.key(BACKUP)].mode == "alone"


def test_a_graceful_stop_hands_over_within_a_second(pair):
    primary, backup = start_both(pair)
    pair.stop(PRIMARY)
    took = pair.run_until(lambda: serving(backup), 1.0)
    assert took <= 1.0
    assert pair.state(BACKUP) == role.ACTIVE_REPLICATED


def test_a_backup_cut_off_from_everyone_never_activates(pair):
    primary, backup = start_both(pair)
    pair.reach.cut.add(pair.key(BACKUP))
    pair.mesh.run(60.0)
    assert backup.router is None
    assert pair.state(BACKUP) in (role.STARTING, role.BACKUP_SYNCING)
    assert serving(primary)
    assert pair.state(PRIMARY) == role.ACTIVE_ALONE
