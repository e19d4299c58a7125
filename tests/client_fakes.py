"""
A fake message engine for the client protocol and client API tests.

It honours the engine's contract as the client listener sees it (C{name},
C{queues}, C{submit}) with a real L{QueueManager} over a real SQLite store
run inline, but what C{submit} does is up to the test: by default each
call returns a L{Deferred} the test fires (L{FakeEngine.submitted}); with
C{auto=True} it accepts local messages into the store at once, as the
real engine does for a bare queue, so sends can be received.
"""

import itertools
from dataclasses import dataclass

from twisted.internet.defer import Deferred, DeferredList, fail, succeed
from twisted.internet.testing import StringTransport

from meshroute.wire import client_frames as f
from meshroute.errors import MeshrouteError
from meshroute.messages import Message, parse_address
from meshroute.queues import QueueManager
from meshroute.store import InlineExecutor, SQLiteStore
from meshroute.wire.codec import FrameDecoder, encode

ROUTER = "router-a"


class ClientEnd:
    """
    A client's end of one connection to a client factory, driven frame by
    frame (a C{StringTransport}, or the one given).
    """

    def __init__(self, factory, transport=None) -> None:
        self.factory = factory
        self.protocol = factory.buildProtocol(None)
        self.transport = transport if transport is not None else StringTransport()
        self.protocol.makeConnection(self.transport)
        self._decoder = FrameDecoder(frames=f.FROM_ROUTER)

    def send(self, *frames) -> None:
        self.protocol.dataReceived(b"".join(encode(frame) for frame in frames))

    def received(self) -> list:
        """
        Every frame the router wrote since the last call.
        """
        data = self.transport.value()
        self.transport.clear()
        return self._decoder.feed(data)

    def lose(self) -> None:
        self.protocol.connectionLost(None)


class FakeUnknownRouter(MeshrouteError):
    code = "unknown-router"


class FakeBacklogFull(MeshrouteError):
    code = "backlog-full"


class RecordingEvents:
    def __init__(self) -> None:
        self.records: list[tuple[str, dict]] = []

    def emit(self, event: str, **fields) -> None:
        self.records.append((event, fields))

    def emit_many(self, event: str, names: tuple, rows) -> None:
        self.records.extend((event, dict(zip(names, row))) for row in rows)

    def named(self, event: str) -> list[dict]:
        return [fields for name, fields in self.records if name == event]


@dataclass
class Submitted:
    """
    One C{submit} call and the Deferred the test controls.
    """

    address: str
    body: bytes
    headers: dict
    persistent: bool
    deferred: Deferred
    duplicate_id: str = ""


class FakeEngine:
    """
    @ivar submitted: every submit not handled automatically, in order.
    """

    def __init__(self, path: str, clock, auto: bool = False) -> None:
        self.name = ROUTER
        self.store = SQLiteStore(path, sync="normal", executor=InlineExecutor(), router=ROUTER)
        self.store.open()
        self.events = RecordingEvents()
        self.queues = QueueManager(self.store, self.events, clock)
        self.auto = auto
        self.submitted: list[Submitted] = []
        self._ids = itertools.count(1)

    def submit(self, address: str, body: bytes, headers: dict, persistent: bool,
               duplicate_id: str = "") -> Deferred:
        if not self.auto:
            d = Deferred()
            self.submitted.append(Submitted(address, body, headers, persistent, d, duplicate_id))
            return d
        try:
            queue, router = parse_address(address, self.name)
        except MeshrouteError as e:
            return fail(e)
        if router != self.name:
            return fail(FakeUnknownRouter(f"no router {router} in the mesh"))
        message = self.message(queue, body, headers, persistent)
        if duplicate_id:
            # As the real engine: the store accepts it once per id.
            def accepted(original):
                if original is not None:
                    return original
                if persistent:
                    self.queues.notify(queue)
                else:
                    self.queues.put_transient(queue, message)
                return message.msg_id

            return self.store.accept_once(message, duplicate_id).addCallback(accepted)
        if not persistent:
            self.queues.put_transient(queue, message)
            return succeed(message.msg_id)
        d = self.store.accept(message)
        d.addCallback(lambda _: self.queues.notify(queue))
        d.addCallback(lambda _: message.msg_id)
        return d

    def submit_many(self, sends) -> Deferred:
        """
        A SendBatch's messages, each as L{submit} takes it (recorded one by
        one when not automatic): one Deferred, one outcome per message.
        """
        ds = [self.submit(address, body, headers, persistent, duplicate_id)
              for address, headers, body, persistent, duplicate_id in sends]
        return DeferredList(ds, consumeErrors=True).addCallback(
            lambda results: [value for _, value in results])

    def message(self, queue: str, body: bytes, headers: dict | None = None,
                persistent: bool = True) -> Message:
        return Message(
            msg_id=f"{self.name}:fake:{next(self._ids)}", origin=self.name,
            dest_router=self.name, dest_queue=queue, body=body, headers=dict(headers or {}),
            persistent=persistent, accepted_at=1000.0,
        )

    def enqueue(self, queue: str, *bodies: bytes) -> list[Message]:
        """
        Put persistent messages straight into a local queue.
        """
        messages = []
        for body in bodies:
            message = self.message(queue, body)
            self.store.accept(message)
            self.queues.notify(queue)
            messages.append(message)
        return messages

    def close(self) -> None:
        self.store.close()
