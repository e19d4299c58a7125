"""
The faults the simulation injects below the routers: an in-memory
network whose links can be cut, reset and slowed, clients that can be cut
off, and a store executor that fails the store call it is told to.

Everything builds on L{memory_mesh}: L{FaultyNetwork} is a
L{memory_mesh.MemoryNetwork} with per-pair rules, L{FaultyMesh} a
L{memory_mesh.MemoryMesh} on it whose routers' stores run on
L{FaultyExecutor}s, or on L{LaggingExecutor}s whose commits take time
(a crash loses what they had not committed).
"""

from collections import deque

from twisted.internet.defer import fail
from twisted.internet.error import ConnectionRefusedError
from twisted.internet.task import Clock
from twisted.logger import Logger

from meshroute.testing.memory_mesh import (
    FaultyExecutor,
    LaggingExecutor,
    MemoryMesh,
    MemoryNetwork,
)


log = Logger()


class ReactorClock(Clock):
    """
    A L{Clock} that, like a reactor, logs an exception raised by a timed
    call and goes on with the next one, instead of letting it end the
    whole simulation: the logged error is what the run reports.
    """

    def advance(self, amount: float) -> None:
        self.rightNow += amount
        self._sortCalls()
        while self.calls and self.calls[0].getTime() <= self.seconds():
            call = self.calls.pop(0)
            call.called = 1
            try:
                call.func(*call.args, **call.kw)
            except Exception:
                log.failure("Unhandled error in a timed call {call}", call=call)
            self._sortCalls()


class RouterClock:
    """
    One router's view of the mesh's clock, so that a crash can end every
    timer the dead router left (a killed process runs none of them).
    """

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._calls: list = []
        self.dead = False

    def seconds(self) -> float:
        return self._clock.seconds()

    def callLater(self, delay, f, *args, **kwargs):
        call = self._clock.callLater(delay, f, *args, **kwargs)
        if self.dead:
            call.cancel()
        else:
            self._calls = [c for c in self._calls if c.active()]
            self._calls.append(call)
        return call

    def getDelayedCalls(self) -> list:
        return [c for c in self._calls if c.active()]

    def kill(self) -> None:
        self.dead = True
        for call in self._calls:
            if call.active():
                call.cancel()
        self._calls = []


#: Bytes a connection side holds written and not yet delivered before its
#: transport pauses a registered streaming producer (a small socket
#: buffer), as a real transport does; it resumes it once drained.
HIGH_WATER = 4096


def _pair(a: str, b: str) -> frozenset:
    return frozenset((a, b))


class FaultyNetwork(MemoryNetwork):
    """
    A L{MemoryNetwork} whose connections between two given endpoints can
    be held (cut: nothing arrives, new connections are refused), reset
    (both ends see the connection lost, bytes in flight are lost) or
    slowed (everything arrives C{delay} seconds after it was written).
    """

    def __init__(self) -> None:
        super().__init__()
        self.clock = ReactorClock()
        self.cut: dict[frozenset, int] = {}
        self.delays: dict[frozenset, float] = {}
        self._late: dict[int, deque] = {}

    def cut_pair(self, a: str, b: str) -> None:
        key = _pair(a, b)
        self.cut[key] = self.cut.get(key, 0) + 1

    def heal_pair(self, a: str, b: str) -> None:
        key = _pair(a, b)
        self.cut[key] -= 1
        if not self.cut[key]:
            del self.cut[key]
        self.flush()

    def reset(self, *names: str) -> None:
        """
        Reset every connection between C{names} (one name: every
        connection of it): both ends see it lost, unsent bytes are lost.
        """
        for connection in list(self._connections):
            if not set(names) <= connection.routers:
                continue
            for io in (connection.client_io, connection.server_io):
                io.stream = []
            self._late.pop(id(connection), None)
            for io in (connection.client_io, connection.server_io):
                if not io.disconnected:
                    io.disconnecting = io.disconnected = True
                    io.reportDisconnect()
            self._connections.remove(connection)
        self.flush()

    def held(self, connection) -> bool:
        return bool(connection.routers & self.partitioned) or frozenset(
            connection.routers) in self.cut

    def _connect(self, client_router: str, address: str, factory):
        listening = self._listening.get(address)
        if listening is not None and _pair(client_router, listening[0]) in self.cut:
            return fail(ConnectionRefusedError(f"{address} is cut off"))
        connecting = super()._connect(client_router, address, factory)
        if self._connections:
            connection = self._connections[-1]
            for io in (connection.client_io, connection.server_io):
                io.buffer_size = HIGH_WATER
        return connecting

    def flush(self) -> None:
        moved = True
        while moved:
            moved = False
            for connection in list(self._connections):
                held = self.held(connection)
                delay = self.delays.get(frozenset(connection.routers))
                if delay or id(connection) in self._late:
                    moved |= self._pump_late(connection, held, delay or 0.0)
                elif connection.pump(held=held):
                    moved = True
                if connection.finished:
                    self._connections.remove(connection)
                    self._late.pop(id(connection), None)

    def _pump_late(self, connection, held: bool, delay: float) -> bool:
        """
        L{memory_mesh._Connection.pump} for a slow connection: bytes (and
        finally the close) reach the other side C{delay} seconds after
        they were written, in order.
        """
        now = self.clock.seconds()
        late = self._late.setdefault(id(connection), deque())
        moved = False
        sides = [(connection.client_io, connection.server_io),
                 (connection.server_io, connection.client_io)]
        for source, target in sides:
            data = source.getOutBuffer()
            if data:
                late.append((now + delay, source, target, data))
                self.clock.callLater(delay, lambda: None)  # wake run() then
                moved = True
        while late and late[0][0] <= now and not held:
            _, source, target, data = late.popleft()
            if not target.disconnected:
                target.bufferReceived(data)
            moved = True
        in_flight = {source for _, source, _, _ in late}
        for source, target in sides:
            if source.disconnecting and not source.disconnected:
                source.disconnected = True
                source.reportDisconnect()
                moved = True
            if (source.disconnected and not target.disconnected and not held
                    and source not in in_flight):
                target.disconnecting = target.disconnected = True
                target.reportDisconnect()
                moved = True
        if not late and not delay:
            del self._late[id(connection)]
        return moved

    def buffered(self):
        """
        C{(writer, reader, chunks)} for every connection side with bytes
        written and not yet delivered: one chunk per write.
        """
        for connection in self._connections:
            names = sorted(connection.routers)
            for io in (connection.client_io, connection.server_io):
                if io.stream:
                    writer = (connection.server_router if io is connection.server_io
                              else next(n for n in names if n != connection.server_router))
                    reader = next((n for n in names if n != writer), writer)
                    yield writer, reader, io.stream
            for _, source, _, data in self._late.get(id(connection), ()):
                writer = (connection.server_router if source is connection.server_io
                          else next(n for n in names if n != connection.server_router))
                reader = next((n for n in names if n != writer), writer)
                yield writer, reader, [data]


class FaultyMesh(MemoryMesh):
    """
    A L{MemoryMesh} on a L{FaultyNetwork}, each router's store on a
    L{FaultyExecutor} or a L{LaggingExecutor} (in C{executors}, by router
    name), each router on its own L{RouterClock} (in C{clocks}).
    """

    def __init__(self, data_root, store_lags: dict[str, float] | None = None,
                 **intervals) -> None:
        """
        @param store_lags: how long each router's store takes to commit
            (L{LaggingExecutor}); a router not named commits at once.
        """
        super().__init__(data_root, **intervals)
        self.network = FaultyNetwork()
        self.clock = self.network.clock
        self.clocks: dict[str, RouterClock] = {}
        self._store_lags = store_lags or {}

    def router_clock(self, name: str) -> RouterClock:
        clock = self.clocks[name] = RouterClock(self.clock)
        return clock

    def crash(self, name: str) -> None:
        """
        L{MemoryMesh.crash}, and the dead router's timers never fire.
        """
        super().crash(name)
        self.clocks[name].kill()

    def executor(self, name: str) -> FaultyExecutor | LaggingExecutor:
        """
        Router C{name}'s store executor: lagging on its own clock (which
        dies with it) if the schedule says so.
        """
        lag = self._store_lags.get(name, 0.0)
        if not lag:
            return super().executor(name)
        return LaggingExecutor(self.clocks[name], lag)
