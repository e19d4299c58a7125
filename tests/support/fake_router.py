"""
The router, faked for client tests: one module, three depths of fake.

 - L{FakeEngine}: the router's message engine under the real router-side
   listener (L{meshroute.sessions.native_listener.ClientFactory}), with a real
   queue manager over a real SQLite store run inline; what C{submit}
   does is up to the test (each call returns a Deferred the test fires,
   L{FakeEngine.submitted}), or, with C{auto=True}, local messages are
   accepted at once, as the real engine does for a bare queue.  Its
   topic subscriptions (C{topics}) are the router's own over that store
   and queue manager (no fan-out: nothing is published to them; no
   mesh: none is mesh-wide).  The
   C{engine} fixture (conftest) is one.
 - L{Harness} and L{MemoryEndpoint}: clients of the meshroute client API
   connected through iosim to that real listener over a L{FakeEngine};
   through a L{CuttableEndpoint}, connections a test cuts or refuses.
 - L{ScriptedEndpoint}: no router code at all: each connection attempt
   of the client waits until the test accepts it (a L{RouterEnd}, which
   the test scripts frame by frame) or refuses it.

The client's end of a connection to the real listener, driven frame by
frame, is L{router_connection.Connection}.
"""

import itertools
from dataclasses import dataclass

from twisted.internet.defer import Deferred, DeferredList, fail, succeed
from twisted.internet.error import ConnectionDone, ConnectionRefusedError
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.test import iosim

from meshroute.client import connect_endpoint
from meshroute.errors import MeshrouteError
from meshroute.messages import Message, parse_address
from meshroute.router.message_events import MessageEvents
from meshroute.router.queues import QueueManager
from meshroute.router.topic_interest import TopicInterest
from meshroute.router.retained import RetainedMessages
from meshroute.router.system_messages import SystemMessages
from meshroute.router.topic_subscriptions import TopicSubscriptions
from meshroute.sessions.native_listener import ClientFactory
from meshroute.store import InlineExecutor, SQLiteStore
from meshroute.wire import client_frames as f
from meshroute.wire.codec import FrameDecoder, encode
from meshroute.topics.backlog import TopicBacklog

from support.client_testing import result_of

#: The faked router's name.
ROUTER = "router-a"
#: The session id a scripted router gives.
SESSION = "5" * 32
#: The session id of a session the scripted router recreates.
OTHER_SESSION = "6" * 32


# -- the engine under the real listener ------------------------------------------


class FakeUnknownRouter(MeshrouteError):
    "The engine's refusal of a destination router it does not know."
    code = "unknown-router"


class FakeBacklogFull(MeshrouteError):
    "The engine's refusal of a send past a destination's backlog."
    code = "backlog-full"


class RecordingEvents:
    "The event log, kept in memory for the test to read."

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
        self.retained = RetainedMessages(ROUTER, self.store, SystemMessages(ROUTER, None, None),
                                         clock, self.events)
        self.topics = TopicSubscriptions(self.store, self.queues, TopicInterest(ROUTER, self.store, clock),
                                         mesh_wide=None,
                                         message_events=MessageEvents(ROUTER, self.events,
                                                                      self.queues.rates),
                                         retained=self.retained)
        #: The real rule; a test holds publishers with C{measured}.
        self.topic_backlog = TopicBacklog()
        self.auto = auto
        self.submitted: list[Submitted] = []
        self._ids = itertools.count(1)

    def submit(self, address: str, body: bytes, headers: dict, persistent: bool,
               duplicate_id: str = "", expires_ms: int = 0, notify_expiry: bool = False,
               sender: str = "") -> Deferred:
        """
        As the real engine's; a time to live (C{expires_ms},
        C{notify_expiry}, C{sender}) is taken and not kept: this fake's
        messages never expire.
        """
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
        ds = [self.submit(address, body, headers, persistent, duplicate_id, *expiry)
              for address, headers, body, persistent, duplicate_id, *expiry in sends]
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


# -- the real listener, in memory --------------------------------------------------


class MemoryEndpoint:
    """
    A client endpoint whose connections reach a L{ClientFactory} through
    iosim; C{pump} moves the bytes of the latest connection, C{pumps}
    those of all.
    """

    def __init__(self, server_factory, clock) -> None:
        self._server_factory = server_factory
        self._clock = clock
        self.pump: iosim.IOPump | None = None
        self.pumps: list[iosim.IOPump] = []
        self.server = None

    def connect(self, factory):
        client = factory.buildProtocol(None)
        self.server = self._server_factory.buildProtocol(None)
        self.pump = iosim.connect(
            self.server, iosim.makeFakeServer(self.server),
            client, iosim.makeFakeClient(client),
            greet=False, clock=self._clock,
        )
        self.pumps.append(self.pump)
        return succeed(client)


class CuttableEndpoint(MemoryEndpoint):
    """
    A L{MemoryEndpoint} that a test can cut (bytes in flight are lost) or
    make refuse new connections (C{refusing}).
    """

    def __init__(self, server_factory, clock) -> None:
        super().__init__(server_factory, clock)
        self.refusing = False
        self.attempts = 0

    def connect(self, factory):
        self.attempts += 1
        if self.refusing:
            return fail(ConnectionRefusedError("the network is cut"))
        return super().connect(factory)

    def flush(self) -> None:
        while any([pump.flush() for pump in self.pumps]):
            pass

    def cut(self) -> None:
        """
        The network fails: both ends see the connection lost, and nothing
        written and not yet delivered arrives.
        """
        for pump in self.pumps:
            if pump.clientIO.disconnected:
                continue
            for io in (pump.clientIO, pump.serverIO):
                io.stream = []
                io.disconnecting = io.disconnected = True
            pump.serverIO.reportDisconnect()
            pump.clientIO.reportDisconnect()


class Harness:
    """
    Clients of the meshroute client API connected to a real
    L{ClientFactory} (made with C{factory_options}) through iosim.
    """

    def __init__(self, engine, clock, **factory_options) -> None:
        self.engine = engine
        self.clock = clock
        self.factory = ClientFactory(engine, clock, **factory_options)
        self.endpoint = MemoryEndpoint(self.factory, clock)

    def connect(self, client_id="tester", **options):
        d = connect_endpoint(self.clock, self.endpoint, client_id=client_id, **options)
        self.flush()
        return result_of(d)

    def flush(self) -> None:
        while any([pump.flush() for pump in self.endpoint.pumps]):
            pass

    def connect_for_cli(self, reactor, endpoint_string, options=None, **overrides):
        """
        A stand-in for L{meshroute.client.connect} that the commands call.
        """
        d = connect_endpoint(self.clock, self.endpoint, options, **overrides)
        self.flush()
        return d


# -- a scripted router -------------------------------------------------------------


class RouterEnd:
    """
    The router's end of one client connection.

    @ivar transport: the client's C{StringTransport}.
    @ivar protocol: the client's protocol.
    """

    def __init__(self, protocol) -> None:
        self.protocol = protocol
        self.transport = StringTransport()
        self._decoder = FrameDecoder(frames=f.FROM_CLIENT)
        self._read: list = []
        protocol.makeConnection(self.transport)

    def frames(self) -> list:
        """
        Every frame the client wrote since the last call.
        """
        data = self.transport.value()
        self.transport.clear()
        return self._decoder.feed(data)

    def of(self, cls) -> list:
        """
        The frames of type C{cls} the client wrote since the last call (the
        others are dropped).
        """
        return [frame for frame in self.frames() if type(frame) is cls]

    def send(self, *frames) -> None:
        """
        The router writes C{frames}.
        """
        self.protocol.dataReceived(b"".join(encode(frame) for frame in frames))

    def open(self, session_id: str = SESSION, reattached: bool = False, last_command_id: int = 0,
             ttl_ms: int | None = None) -> f.Open:
        """
        Read the client's Open and answer Opened (with the client's TTL
        unless C{ttl_ms} overrides it).

        @return: the Open.
        """
        (frame,) = self.frames()
        assert type(frame) is f.Open, frame
        ttl_ms = frame.ttl_ms if ttl_ms is None else ttl_ms
        self.send(f.Opened(1, session_id, ROUTER, ttl_ms, reattached, last_command_id))
        return frame

    def lose(self, why: str = "cut") -> None:
        """
        The connection is lost.
        """
        self.transport.disconnected = True
        self.protocol.connectionLost(Failure(ConnectionDone(why)))

    @property
    def aborted(self) -> bool:
        "The client let this connection go."
        return self.transport.disconnected or self.transport.disconnecting


class Attempt:
    """
    One connection attempt of the client, waiting for the test's verdict.
    """

    def __init__(self, factory) -> None:
        self.factory = factory
        self.deferred = Deferred()

    def accept(self) -> RouterEnd:
        end = RouterEnd(self.factory.buildProtocol(None))
        self.deferred.callback(end.protocol)
        return end

    def refuse(self) -> None:
        self.deferred.errback(Failure(ConnectionRefusedError("nobody there")))


class ScriptedEndpoint:
    """
    A client endpoint whose attempts the test settles.
    """

    def __init__(self) -> None:
        self.attempts: list[Attempt] = []

    def connect(self, factory):
        attempt = Attempt(factory)
        self.attempts.append(attempt)
        return attempt.deferred

    def accept(self) -> RouterEnd:
        """
        Accept the latest attempt.
        """
        return self.attempts[-1].accept()

    def refuse(self) -> None:
        """
        Refuse the latest attempt.
        """
        self.attempts[-1].refuse()
