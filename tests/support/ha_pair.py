"""
A pair of real HA instances (L{build_instance}) and a witness router in
the in-memory mesh on one clock, with inline store executors (or ones
that commit at the end of each clock turn): the C{pair} fixture, starting
both, sending to the active, refusing an instance's dials to an address.
"""

import dataclasses

import pytest
from twisted.internet.defer import fail
from twisted.internet.error import ConnectionRefusedError
from meshroute.testing.memory_mesh import SECRET, MemoryMesh
from meshroute.wire import client_frames as f
from meshroute.sessions.settings import ClientListenerConfig
from meshroute.events import read_events
from meshroute.harules import role
from meshroute.ha.build import build_instance
from meshroute.ha.instance import HAInstance, instance_name
from meshroute.harules.settings import (BACKUP, PRIMARY, HASettings, ReplicationSettings,
                                        WitnessSettings)
from meshroute.store import InlineExecutor, TurnExecutor
from meshroute.store.checkpoints import WalCheckpoints


ROUTER = "router-b"
WITNESS = "router-a"
HEARTBEAT_MS = 500
LEASE_MS = 3000
FAILOVER_BOUND = (LEASE_MS + 2 * HEARTBEAT_MS) / 1000 + 1.0
QUEUE = f"orders@{ROUTER}"


class _InlinePool:
    """
    A thread pool that runs its work at once (snapshots, in these tests).
    """

    def callInThreadWithCallback(self, on_result, function, *args, **kwargs):
        try:
            result = function(*args, **kwargs)
        except BaseException as e:  # handed to the Deferred, as a thread would
            on_result(False, e)
        else:
            on_result(True, result)


def inline_executor(replication=None):
    return InlineExecutor(replication=replication)


class _TurnClock:
    """
    The clock a turn executor is given: the pair's, without its thread
    pool, so that the executor checkpoints inline (as on a test clock).
    """

    def __init__(self, clock) -> None:
        self._clock = clock

    def seconds(self) -> float:
        return self._clock.seconds()

    def callLater(self, delay, f, *args, **kwargs):
        return self._clock.callLater(delay, f, *args, **kwargs)


def turn_executor(clock):
    """
    Makes executors that commit at the end of each turn of C{clock}, and
    checkpoint by it (not by the wall clock: a run is the same every
    time).
    """
    def executor(replication=None):
        return TurnExecutor(_TurnClock(clock), replication=replication,
                            checkpoints=WalCheckpoints(monotonic=clock.seconds))

    return executor


class _DialingEndpoints:
    """
    One instance's endpoints on the in-memory network, whose dials to the
    addresses in C{refused} fail (as on a path that drops them), while
    everything else goes on.
    """

    def __init__(self, endpoints) -> None:
        self._endpoints = endpoints
        self.refused: set[str] = set()
        # address -> the protocols of the connections dialled to it
        self._dialled: dict[str, list] = {}

    def server(self, address: str):
        return self._endpoints.server(address)

    def client(self, address: str):
        return _Dialing(self, address)

    def dial(self, address: str, factory):
        if address in self.refused:
            return fail(ConnectionRefusedError(f"{address} is refused"))
        dialling = self._endpoints.client(address).connect(factory)
        return dialling.addCallback(self._dialled_to, address)

    def _dialled_to(self, protocol, address: str):
        self._dialled.setdefault(address, []).append(protocol)
        return protocol

    def refuse(self, address: str) -> None:
        """
        Refuse every dial to C{address} from now on, and close the
        connections dialled to it before.
        """
        self.refused.add(address)
        for protocol in self._dialled.pop(address, []):
            protocol.transport.loseConnection()


class _Dialing:
    """
    A client endpoint of L{_DialingEndpoints}.
    """

    def __init__(self, endpoints: _DialingEndpoints, address: str) -> None:
        self._endpoints = endpoints
        self._address = address

    def connect(self, factory):
        return self._endpoints.dial(self._address, factory)


class Pair:
    def __init__(self, tmp_path) -> None:
        self.mesh = MemoryMesh(tmp_path)
        self.clock = self.mesh.clock
        self.clock.getThreadPool = _InlinePool
        self.clock.callFromThread = lambda f, *a, **kw: f(*a, **kw)
        self.tmp_path = tmp_path
        self.witness_router = self.mesh.add(WITNESS)
        self.instances: dict[str, HAInstance] = {}
        self.stopped: list[str] = []  # instances that ended their process
        self._ending: list = []  # their stops under way
        # instance key -> its endpoints, whose dials may be refused (L{refuse})
        self._endpoints: dict[str, _DialingEndpoints] = {}

    def key(self, ha_role: str) -> str:
        return instance_name(ROUTER, ha_role)

    def start(self, ha_role: str, turns: bool = False, **ha_options) -> HAInstance:
        """
        Start the instance of C{ha_role}; C{ha_options}: more L{HASettings}
        fields (C{group_name} the router's name unless given).

        @param turns: its stores commit at the end of each clock turn
            (L{TurnExecutor}), not inline: a commit, and so the position
            it takes, comes after the turn that submitted it, as with the
            executors twistd runs.
        """
        other = BACKUP if ha_role == PRIMARY else PRIMARY
        key = self.key(ha_role)
        base = self.mesh.config(ROUTER)
        config = dataclasses.replace(
            base, path=f"(memory)/{key}.toml",
            data_dir=str(self.tmp_path / key.replace("/", "-")),
            listener=dataclasses.replace(base.listener, endpoint=key),
            clients=ClientListenerConfig((f"clients-{ha_role}",)),
            ha=HASettings(
                role=ha_role, group_name=ha_options.pop("group_name", ROUTER),
                replication=ReplicationSettings(f"repl-{ha_role}", f"repl-{other}",
                                                "(memory)", SECRET),
                witnesses=(WitnessSettings(WITNESS, WITNESS),),
                heartbeat_interval_ms=HEARTBEAT_MS, lease_timeout_ms=LEASE_MS, **ha_options))
        endpoints = self._endpoints[key] = _DialingEndpoints(self.mesh.network.endpoints(key))
        executor = turn_executor(self.clock) if turns else inline_executor
        instance = build_instance(config, self.clock, endpoints, executor,
                                  lambda: self._process_ended(key))
        self.instances[key] = instance
        instance.privilegedStartService()
        instance.startService()
        self.mesh.network.flush()
        return instance

    def _process_ended(self, key: str) -> None:
        """
        The instance C{key} ended its process by itself: it stops, as
        L{meshroute.process.ProcessService} stops it.
        """
        self.stopped.append(key)
        instance = self.instances.pop(key, None)
        if instance is not None:
            self._ending.append(instance.stopService())

    def refuse(self, ha_role: str, address: str) -> None:
        """
        Close the connections the running instance of C{ha_role} dialled
        to C{address}, and refuse its dials there until L{heal_dials}
        (its vote connection to the other instance's replication
        listener, say, while the other instance's connections work).
        """
        self._endpoints[self.key(ha_role)].refuse(address)

    def heal_dials(self, ha_role: str, address: str) -> None:
        """
        The instance of C{ha_role} reaches C{address} again (L{refuse}).
        """
        self._endpoints[self.key(ha_role)].refused.discard(address)

    def states(self) -> dict[str, str]:
        return {key: instance.role.state for key, instance in self.instances.items()
                if instance.role is not None}

    def run_until(self, predicate, limit: float, step: float = 0.05) -> float:
        start = self.clock.seconds()
        while not predicate():
            assert self.clock.seconds() - start <= limit, (
                f"not within {limit} s: {self.states()}")
            self.mesh.run(step)
        return self.clock.seconds() - start

    def kill(self, ha_role: str) -> None:
        """
        SIGKILL: the instance's connections reset, it says nothing more.
        """
        key = self.key(ha_role)
        network = self.mesh.network
        network.partitioned.add(key)
        for connection in network.connections_of(key):
            connection.reset_from(key)
        instance = self.instances.pop(key)
        stopped = instance.stopService()
        self.mesh.run(2.0)
        assert stopped.called
        network.forget(key)
        network.partitioned.discard(key)

    def shut(self) -> None:
        if self._ending:
            self.mesh.run(2.0)
            assert all(stopped.called for stopped in self._ending)
        for key in list(self.instances):
            stopped = self.instances.pop(key).stopService()
            self.mesh.run(2.0)
            assert stopped.called
        self.mesh.stop_all()


@pytest.fixture
def pair(tmp_path):
    pair = Pair(tmp_path)
    yield pair
    pair.shut()


def serving(instance: HAInstance) -> bool:
    return instance.router is not None and instance.router.describe()["serving"]


def start_both(pair: Pair) -> tuple[HAInstance, HAInstance]:
    primary = pair.start(PRIMARY)
    backup = pair.start(BACKUP)
    pair.run_until(lambda: pair.states() == {
        pair.key(PRIMARY): role.ACTIVE_REPLICATED, pair.key(BACKUP): role.BACKUP_IN_SYNC}
        and serving(primary), 15.0)
    return primary, backup


def ha_events(instance: HAInstance, event: str) -> list[dict]:
    instance.events.flush()
    return [e for e in read_events(instance.events.data_dir) if e["event"] == event]


def send(instance: HAInstance, count: int) -> list:
    engine = instance.router.engine
    return [engine.submit(QUEUE, b"%d" % i, {}, True) for i in range(count)]


def depth(instance: HAInstance) -> int:
    return {queue["name"]: queue["depth"]
            for queue in instance.router.describe_queues()}.get("orders", 0)
