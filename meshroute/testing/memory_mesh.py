"""
An in-memory mesh: real L{RouterService}s wired together by iosim
transports and driven by one shared L{Clock}.

Routers are built exactly as twistd builds them, except that endpoint
strings resolve to an in-memory network instead of sockets: a listener
endpoint string is an address, and a connector endpoint string names the
address it connects to.  Time only moves when the test says so, and
L{MemoryMesh.run} jumps from one scheduled call to the next, flushing
every connection in between, so a minute of mesh time costs milliseconds
and every timer fires at its exact instant.

Faults: L{MemoryMesh.partition} holds all traffic to and from a router
(its connections stay open but nothing arrives, like a frozen process or
a cut cable) and L{MemoryMesh.heal} releases it; L{MemoryMesh.stop} stops
a router as SIGTERM would.

Backpressure is a socket's: a side whose unsent bytes pass
L{BUFFER_SIZE} pauses its streaming producer, and resumes it once they
are sent (iosim alone never pauses one).

It is a supported tool, in L{meshroute.testing} as Twisted keeps its
test doubles in C{twisted.internet.testing}: the tests run meshes on it,
and so does the scale benchmark (C{benchmarks/mesh_scale.py}); an
application may test its use of meshroute against it.  Nothing in the
router imports it.
"""

import sqlite3
from collections.abc import Callable

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.error import ConnectionRefusedError
from twisted.internet.interfaces import IPushProducer
from twisted.internet.task import Clock
from twisted.test import iosim
from zope.interface import implementer

from meshroute.link.settings import ConnectorConfig, ListenerConfig
from meshroute.router.service import RouterService
from meshroute.router.settings import RouterConfig, RoutingConfig
from meshroute.store import InlineExecutor
from meshroute.store.turn_executor import TurnExecutor
from meshroute.store.settings import StoreConfig

__all__ = ["BUFFER_SIZE", "SECRET", "FaultyExecutor", "InjectedStoreError", "LaggingExecutor",
           "MemoryMesh", "MemoryNetwork"]

SECRET = b"in-memory mesh secret"

#: Unsent bytes past which a transport pauses its streaming producer, as
#: Twisted's C{FileDescriptor.bufferSize}.
BUFFER_SIZE = 2**16


class _Transport(iosim.FakeTransport):
    """
    An iosim transport that pauses its streaming producer while more than
    C{buffer_size} bytes wait to be sent, as a TCP transport does.
    """

    buffer_size = BUFFER_SIZE
    unsent = 0
    producer_paused = False

    def write(self, data) -> None:
        if self.disconnecting:
            return
        super().write(data)
        self.unsent += len(data)
        if (self.unsent > self.buffer_size and self.streamingProducer
                and self.producer is not None and not self.producer_paused):
            self.producer_paused = True
            self.producer.pauseProducing()

    def getOutBuffer(self):
        data = super().getOutBuffer()
        self.unsent = 0
        if self.producer_paused and self.producer is not None:
            self.producer_paused = False
            self.producer.resumeProducing()
        return data


class InjectedStoreError(sqlite3.OperationalError):
    """
    A store call a test made fail, as a disk I/O error would.
    """


class _InjectedFaults:
    """
    An executor whose next calls of a named store function can be made to
    fail, as a disk I/O error would: the call is not run, so nothing of it
    is written.

    @ivar failed: the names of the calls failed so far.
    """

    def _init_faults(self) -> None:
        self._faults: dict[str, int] = {}
        self.failed: list[str] = []

    def fail_next(self, function: str, times: int = 1) -> None:
        """
        Fail the next C{times} calls of the store function named
        C{function} (e.g. C{"receive_local"}).
        """
        self._faults[function] = self._faults.get(function, 0) + times

    def submit(self, fn, *args):
        name = getattr(fn, "__name__", "")
        if self._faults.get(name):
            self._faults[name] -= 1
            self.failed.append(name)
            return fail(InjectedStoreError(f"disk I/O error (injected into {name})"))
        return super().submit(fn, *args)

    def lose_uncommitted(self) -> None:
        """
        The process dies: what is not committed is lost, and nothing
        submitted from now on runs (nothing answers it either).
        """


class FaultyExecutor(_InjectedFaults, InlineExecutor):
    """
    An L{InlineExecutor} (every store call commits at once, so a crash
    loses nothing) whose calls can be made to fail.
    """

    def __init__(self) -> None:
        super().__init__()
        self._init_faults()


class LaggingExecutor(_InjectedFaults, TurnExecutor):
    """
    A L{TurnExecutor} on the mesh's clock whose transactions commit
    C{lag_s} after the first call submitted for them, as a commit whose
    fsync takes that long: meanwhile the router goes on (its transfers
    leave, its peers answer), and a crash (L{lose_uncommitted}) loses
    every call not committed yet.  Its calls can be made to fail.
    """

    def __init__(self, clock, lag_s: float) -> None:
        super().__init__(clock)
        self._init_faults()
        self.lag_s = lag_s
        self._dead = False

    @property
    def lag_s(self) -> float:
        """
        How long after the first call submitted for a transaction it
        commits (settable: a test slows one router's disk).
        """
        return self._turn.delay_s

    @lag_s.setter
    def lag_s(self, lag_s: float) -> None:
        self._turn.delay_s = lag_s

    def _queued(self, kind: int, fn, args: tuple, relaxed: bool) -> Deferred:
        if self._dead:
            return Deferred()
        return super()._queued(kind, fn, args, relaxed)

    def lose_uncommitted(self) -> list[str]:
        """
        As L{_InjectedFaults.lose_uncommitted}; returns the names of the
        functions lost, in submission order.
        """
        self._dead = True
        return [getattr(item[1], "__name__", "") for item in self._turn.take()]

    def stop(self) -> Deferred:
        if self._dead and self._connection is not None and not self._closed:
            self._closed = True
            if self._checkpoint_call is not None and self._checkpoint_call.active():
                self._checkpoint_call.cancel()
            self._connection.close()
            return succeed(None)
        return super().stop()


class _Connection:
    """
    Two iosim transports and the rules that move bytes and closes between
    them.

    A side that closes (C{loseConnection} or C{abortConnection}) sees its
    own C{connectionLost} at once, as a socket does; the other side learns
    of it only when the connection is not held, after the bytes written
    before the close have arrived.
    """

    def __init__(self, server, client, client_router: str, server_router: str) -> None:
        self.server_io = _Transport(server, isServer=True)
        self.client_io = _Transport(client, isServer=False)
        self.server_router = server_router
        self.routers = {client_router, server_router}
        server.makeConnection(self.server_io)
        client.makeConnection(self.client_io)

    @property
    def finished(self) -> bool:
        return bool(self.server_io.disconnected and self.client_io.disconnected)

    def unsent_from(self, router: str) -> int:
        """
        The bytes C{router} wrote on this connection that have not left it.
        """
        return (self.server_io if self.server_router == router else self.client_io).unsent

    def reset_from(self, router: str) -> None:
        """
        C{router} died: the other side sees its connection reset at once,
        and nothing the dead side does afterwards reaches it.
        """
        alive = self.client_io if self.server_router == router else self.server_io
        if not alive.disconnected:
            alive.disconnecting = alive.disconnected = True
            alive.reportDisconnect()

    def _sides(self):
        return [(self.client_io, self.server_io), (self.server_io, self.client_io)]

    def pump(self, held: bool) -> bool:
        """
        Move what can move now.

        @return: whether anything happened.
        """
        moved = False
        if not held:
            for source, target in self._sides():
                moved |= self._hand(target, source.getOutBuffer())
        return self._close(held) or moved

    def take(self, held: bool) -> list:
        """
        The bytes written on each side so far, on their way to the other
        (none while C{held}): for L{deliver}.
        """
        if held:
            return []
        return [(target, source.getOutBuffer()) for source, target in self._sides()]

    def deliver(self, taken: list, held: bool) -> bool:
        """
        Hand each side the bytes L{take} took for it, then the closes.

        @return: whether anything happened.
        """
        moved = False
        for target, data in taken:
            moved |= self._hand(target, data)
        return self._close(held) or moved

    @staticmethod
    def _hand(target, data: bytes) -> bool:
        if data and not target.disconnected:
            target.bufferReceived(data)
            return True
        return False

    def _close(self, held: bool) -> bool:
        moved = False
        for source, target in self._sides():
            if source.disconnecting and not source.disconnected:
                source.disconnected = True
                source.reportDisconnect()
                moved = True
            if source.disconnected and not target.disconnected and not held:
                target.disconnecting = target.disconnected = True
                target.reportDisconnect()
                moved = True
        return moved


@implementer(IPushProducer)
class _ListeningPort:
    """
    A listening address.  Paused, it holds the connections made to it, as
    a listen backlog does, until it resumes (L{meshroute.router.listening}).
    """

    def __init__(self, network: "MemoryNetwork", address: str) -> None:
        self._network = network
        self._address = address

    def pauseProducing(self) -> None:
        self._network._backlogs.setdefault(self._address, [])

    def resumeProducing(self) -> None:
        self._network._accept(self._address)

    def stopProducing(self) -> None:
        self.stopListening()

    def getHost(self) -> iosim.FakeAddress:
        "An in-memory address is no socket's: the router reports none."
        return iosim.FakeAddress()

    def stopListening(self):
        self._network._listening.pop(self._address, None)
        self._network._accept(self._address)
        return succeed(None)


class _ServerEndpoint:
    def __init__(self, network: "MemoryNetwork", router: str, address: str) -> None:
        self._network = network
        self._router = router
        self._address = address

    def listen(self, factory):
        self._network._listening[self._address] = (self._router, factory)
        return succeed(_ListeningPort(self._network, self._address))


class _ClientEndpoint:
    def __init__(self, network: "MemoryNetwork", router: str, address: str) -> None:
        self._network = network
        self._router = router
        self._address = address

    def connect(self, factory):
        return self._network._connect(self._router, self._address, factory)


class _RouterEndpoints:
    """
    The C{endpoints} argument of L{RouterService}, for one router.
    """

    def __init__(self, network: "MemoryNetwork", router: str) -> None:
        self._network = network
        self._router = router

    def server(self, address: str) -> _ServerEndpoint:
        return _ServerEndpoint(self._network, self._router, address)

    def client(self, address: str) -> _ClientEndpoint:
        return _ClientEndpoint(self._network, self._router, address)


class MemoryNetwork:
    """
    Addresses, connections and the clock they share.
    """

    def __init__(self) -> None:
        self.clock = Clock()
        self._listening: dict[str, tuple[str, object]] = {}
        # The connections waiting for each paused address, as callables
        # that make them.
        self._backlogs: dict[str, list[Callable[[], None]]] = {}
        self._connections: list[_Connection] = []
        self.partitioned: set[str] = set()

    def connections_of(self, router: str) -> list[_Connection]:
        return [c for c in self._connections if router in c.routers]

    def forget(self, router: str) -> None:
        """
        Drop every connection and listening address of C{router}.
        """
        self._connections = [c for c in self._connections if router not in c.routers]
        gone = [a for a, (r, _) in self._listening.items() if r == router]
        self._listening = {a: (r, f) for a, (r, f) in self._listening.items() if r != router}
        for address in gone:
            self._accept(address)

    def endpoints(self, router: str) -> _RouterEndpoints:
        return _RouterEndpoints(self, router)

    def _connect(self, client_router: str, address: str, factory):
        listening = self._listening.get(address)
        if listening is None:
            return fail(ConnectionRefusedError(address))
        backlog = self._backlogs.get(address)
        if backlog is not None:
            held = Deferred()
            backlog.append(
                lambda: self._connect(client_router, address, factory).chainDeferred(held))
            return held
        server_router, server_factory = listening
        if {client_router, server_router} & self.partitioned:
            return fail(ConnectionRefusedError(f"{address} is unreachable"))
        client = factory.buildProtocol(None)
        connection = _Connection(server_factory.buildProtocol(None), client,
                                 client_router, server_router)
        self._connections.append(connection)
        return succeed(client)

    def _accept(self, address: str) -> None:
        """
        C{address} accepts again, or was closed: make the connections that
        waited for it (refused if it was closed).
        """
        for connect in self._backlogs.pop(address, []):
            connect()

    def step(self) -> bool:
        """
        Deliver, on every connection, what was written before this call
        (and the closes that follow): one one-way delay of the network.
        What the deliveries make routers write waits for the next step.
        The scale benchmark steps a mesh this way to count the delays its
        routes take to converge.

        @return: whether anything moved.
        """
        taken = []
        for connection in list(self._connections):
            held = bool(connection.routers & self.partitioned)
            taken.append((connection, held, connection.take(held)))
        moved = False
        for connection, held, data in taken:
            if connection.deliver(data, held):
                moved = True
            if connection.finished:
                self._connections.remove(connection)
        return moved

    def flush(self) -> None:
        """
        Deliver everything deliverable, until nothing moves.
        """
        moved = True
        while moved:
            moved = False
            for connection in list(self._connections):
                if connection.pump(held=bool(connection.routers & self.partitioned)):
                    moved = True
                if connection.finished:
                    self._connections.remove(connection)

    def run(self, seconds: float) -> None:
        """
        Let C{seconds} of mesh time pass, firing every timer at its instant
        and delivering traffic after each.
        """
        end = self.clock.seconds() + seconds
        self.flush()
        while True:
            due = min((call.getTime() for call in self.clock.getDelayedCalls()), default=None)
            if due is None or due > end:
                break
            self.clock.advance(max(0.0, due - self.clock.seconds()))
            self.flush()
        self.clock.advance(end - self.clock.seconds())
        self.flush()


class MemoryMesh:
    """
    Routers on a L{MemoryNetwork}, built from short test intervals.

    @param data_root: a directory for the routers' data-dirs.
    """

    def __init__(self, data_root, keepalive_interval_ms: int = 200,
                 stage_valid_timeout_ms: int = 1000, reject_disconnect_delay_ms: int = 1000,
                 retry_interval_ms: int = 200, store_lag_s: float = 0.0,
                 early_accept_hold_ms: int = 0) -> None:
        """
        @param store_lag_s: with more than 0, every router's store commits
            this long after a call is submitted (L{LaggingExecutor}), and a
            crash loses what it had not committed; else at once.
        @param early_accept_hold_ms: every router's C{[routing]
            early-accept-hold}: by default 0, so that a send is confirmed
            in the turn its store commits, as these tests expect of a store
            that commits at once; the tests of the hold and the simulation
            set it.
        """
        self.network = MemoryNetwork()
        self.clock = self.network.clock
        self.routers: dict[str, RouterService] = {}
        #: The store executor of each router (of its latest start), by the
        #: key it is known by in C{routers}.
        self.executors: dict[str, FaultyExecutor | LaggingExecutor] = {}
        self._store_lag_s = store_lag_s
        self._data_root = data_root
        self._defaults = dict(
            keepalive_interval_ms=keepalive_interval_ms,
            stage_valid_timeout_ms=stage_valid_timeout_ms,
            reject_disconnect_delay_ms=reject_disconnect_delay_ms,
            retry_interval_ms=retry_interval_ms,
        )
        self._early_accept_hold_ms = early_accept_hold_ms

    def config(self, name: str, connect_to=(), listen: bool = True, secret: bytes = SECRET,
               allowed_routers=None, max_hops: int = 16, max_backlog: int = 100_000,
               max_transient_backlog: int = 10_000, min_free_disk: int = 0,
               **overrides) -> RouterConfig:
        """
        A router's configuration: listening at address C{name}, with a
        connector to each router named in C{connect_to}.  Its store syncs
        "normal": these tests are about exactly-once logic, not power loss,
        and a full fsync per inline commit would make them crawl.  No
        C{min-free-disk} unless asked (the host's disk is not the test's).
        """
        settings = {**self._defaults, **overrides}
        listener = None
        if listen:
            listener = ListenerConfig(
                endpoint=name,
                password_file="(memory)",
                secret=secret,
                keepalive_interval_ms=settings["keepalive_interval_ms"],
                stage_valid_timeout_ms=settings["stage_valid_timeout_ms"],
                reject_disconnect_delay_ms=settings["reject_disconnect_delay_ms"],
                allowed_routers=allowed_routers,
            )
        connectors = tuple(
            ConnectorConfig(
                router=peer,
                endpoint=(peer,),
                password_file="(memory)",
                secret=secret,
                retry_interval_ms=settings["retry_interval_ms"],
                max_retry_interval_ms=settings["retry_interval_ms"],
                stage_valid_timeout_ms=settings["stage_valid_timeout_ms"],
            )
            for peer in connect_to
        )
        return RouterConfig(
            path=f"(memory)/{name}.toml",
            name=name,
            data_dir=str(self._data_root / name),
            listener=listener,
            connectors=connectors,
            admin=None,
            routing=RoutingConfig(max_hops=max_hops, max_backlog=max_backlog,
                                  max_transient_backlog=max_transient_backlog,
                                  early_accept_hold_ms=self._early_accept_hold_ms),
            store=StoreConfig(sync="normal", min_free_disk=min_free_disk),
        )

    def start(self, config: RouterConfig, key: str | None = None, epoch: int = 0
              ) -> RouterService:
        """
        Build and start a router from C{config}, known in C{routers} and
        to the network (L{partition}, L{crash}) as C{key} (default: its
        name; two routers may claim one name, as the two instances of an
        HA pair do), serving in C{epoch} (0: without HA).
        """
        key = key or config.name
        clock = self.router_clock(config.name)
        executor = self.executors[key] = self.executor(config.name)
        router = RouterService(config, clock, self.network.endpoints(key), executor=executor,
                               epoch=epoch)
        self.routers[key] = router
        router.startService()
        self.network.flush()
        return router

    def router_clock(self, name: str):
        """
        The clock router C{name} is given (at each start): the mesh's.
        Subclasses may hand out a view of it.
        """
        return self.clock

    def executor(self, name: str) -> "FaultyExecutor | LaggingExecutor":
        """
        The store executor of router C{name} (at each start): inline, so
        every store call commits at once, or lagging (C{store_lag_s}); told
        which calls to fail (C{fail_next}).
        """
        if self._store_lag_s > 0:
            return LaggingExecutor(self.clock, self._store_lag_s)
        return FaultyExecutor()

    def add(self, name: str, connect_to=(), **options) -> RouterService:
        return self.start(self.config(name, connect_to, **options))

    def stop(self, name: str) -> None:
        """
        Stop a router as SIGTERM would, and let its goodbyes arrive.
        """
        router = self.routers.pop(name)
        done = router.stopService()
        self.network.flush()
        assert done.called, f"{name} did not finish stopping"

    def crash(self, name: str) -> None:
        """
        Kill a router abruptly: its peers see their connections reset, it
        says no goodbye, and what it had committed stays in its data-dir
        for a restart; what it had not committed (with C{store_lag_s}) is
        lost, as with SIGKILL.
        """
        # A router a test built itself (not by start) has no executor here.
        executor = self.executors.get(name)
        if executor is not None:
            executor.lose_uncommitted()
        router = self.routers.pop(name)
        self.network.partitioned.add(name)
        for connection in self.network.connections_of(name):
            connection.reset_from(name)
        stopped = router.stopService()
        self.network.flush()
        assert stopped.called, f"{name} did not finish stopping"
        self.network.forget(name)
        self.network.partitioned.discard(name)
        self.network.flush()

    def run(self, seconds: float) -> None:
        self.network.run(seconds)

    def partition(self, name: str) -> None:
        self.network.partitioned.add(name)

    def heal(self, name: str) -> None:
        self.network.partitioned.discard(name)
        self.network.flush()

    def stages(self, name: str) -> dict[str, str]:
        """
        Peer name → stage, for every link of router C{name} with a known peer.
        """
        return {
            link["peer"]: link["stage"]
            for link in self.routers[name].describe_links()
            if link["peer"] is not None
        }

    def stop_all(self) -> None:
        for name in list(self.routers):
            self.stop(name)
