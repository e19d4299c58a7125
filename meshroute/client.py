"""
The Twisted client API of meshroute: send messages through a router and
consume from its queues, over the native client protocol
(docs/client-protocol.md).

Example: send a message to queue C{orders} on router C{router-c} through
the local router's client listener, then consume queue C{orders} of the
local router until one message arrived::

    from twisted.internet import defer, task

    from meshroute.client import connect


    async def main(reactor):
        client = await connect(reactor, "tcp:127.0.0.1:6001", client_id="example")
        try:
            # Fires once the message is durably stored by the local router.
            # Many sends may be in flight at once: pipelining is how
            # throughput is reached.
            msg_id = await client.send("orders@router-c", b"hello",
                                       headers={"content-type": "text/plain"})
            print("accepted as", msg_id)

            one = defer.Deferred()

            def on_message(message):
                print(message.msg_id, message.body, message.redelivered)
                message.ack()
                if not one.called:
                    one.callback(None)

            subscription = await client.subscribe("orders", on_message, prefetch=100)
            await one
            await subscription.cancel()
        finally:
            await client.close()


    task.react(lambda reactor: defer.ensureDeferred(main(reactor)))

Sends fire with the message id once the router accepted the message
(persistent: once it is durable) and fail with L{SendError} (with the
router's C{code}: C{bad-address}, C{unknown-router}, C{backlog-full}, ...)
if it refused it.  If the connection ends first they fail with
L{SessionError}, and whether the router accepted them is unknown; issue
4 (reattachment) will replay them instead.

Consuming: C{on_message} is called with each L{ReceivedMessage}; the
subscription never holds more than C{prefetch} messages delivered and not
yet acknowledged, and L{ReceivedMessage.ack} makes room for the next.
Acknowledgements are batched: all those made in one reactor turn travel in
one frame.  A message not acknowledged when its subscription ends (cancel,
close, connection lost) goes back to the queue and is delivered again,
flagged C{redelivered}.
"""

import base64
import itertools
import os
from dataclasses import dataclass, field
from typing import Callable

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.endpoints import clientFromString, connectProtocol
from twisted.internet.interfaces import IReactorTime
from twisted.internet.protocol import Protocol
from twisted.logger import Logger

from meshroute.clients import frames as f
from meshroute.errors import MeshrouteError, WireError
from meshroute.wire.codec import FrameDecoder, encode

log = Logger()

#: Default time to wait for the router's answer to Open, in seconds.
OPEN_TIMEOUT_S = 30.0

#: The TTL a client asks for unless told otherwise (Artemis' default).
DEFAULT_TTL_MS = 60_000

#: Codes of errors raised by the client itself rather than the router.
CONNECTION_LOST = "connection-lost"
TIMEOUT = "timeout"
CLOSED = "closed"


class ClientError(MeshrouteError):
    """
    Root of the errors of this API.

    @ivar code: a stable code: one of the router's (docs/client-protocol.md)
        or C{connection-lost}, C{timeout}, C{closed}.
    @ivar detail: human-readable explanation.
    """

    def __init__(self, code: str, detail: str = "") -> None:
        super().__init__(f"{code}: {detail}" if detail else code)
        self.code = code
        self.detail = detail


class SendError(ClientError):
    """
    The router refused a message.
    """


class SubscribeError(ClientError):
    """
    The router refused a subscription (or an unsubscription).
    """


class SessionError(ClientError):
    """
    The session ended before the call completed: the connection was lost
    or refused, the router closed it for an error, or the client was
    closed.
    """


@dataclass(eq=False)
class ReceivedMessage:
    """
    One message delivered to a subscription.

    @ivar delivery_id: the router's id of this delivery.
    @ivar redelivered: it was delivered before and not acknowledged.
    """

    msg_id: str
    queue: str
    origin: str
    headers: dict
    body: bytes
    redelivered: bool
    delivery_id: int
    _subscription: "Subscription" = field(repr=False)
    _acked: bool = field(default=False, repr=False)

    def ack(self) -> None:
        """
        Done with this message: the router deletes it.  Batched with the
        other acknowledgements of this reactor turn; acknowledging twice,
        or after the subscription ended, does nothing.
        """
        if not self._acked:
            self._acked = True
            self._subscription._acked(self)


class Subscription:
    """
    A consumer of one queue, made by L{Client.subscribe}.

    @ivar queue: the queue consumed.
    @ivar number: its id in the session.
    @ivar prefetch: most messages held unacknowledged at once.
    @ivar max_messages: total deliveries wanted (None: no limit); no credit
        is granted beyond it.
    @ivar received: messages delivered so far.
    """

    def __init__(self, client: "Client", number: int, queue: str,
                 on_message: Callable[[ReceivedMessage], None], prefetch: int,
                 max_messages: int | None) -> None:
        self._client = client
        self.number = number
        self.queue = queue
        self.prefetch = prefetch
        self.max_messages = max_messages
        self._on_message = on_message
        self.received = 0
        self.active = True
        self._granted = self.initial_credit()

    def initial_credit(self) -> int:
        if self.max_messages is None:
            return self.prefetch
        return min(self.prefetch, self.max_messages)

    def cancel(self) -> Deferred:
        """
        Stop consuming.  Messages not acknowledged go back to the queue.
        Fires once the router confirmed.
        """
        if not self.active:
            return succeed(None)
        self.active = False
        return self._client._unsubscribe(self)

    def _delivered(self, frame: f.Deliver) -> None:
        self.received += 1
        message = ReceivedMessage(
            frame.msg_id, self.queue, frame.origin, frame.headers, frame.body,
            frame.redelivered, frame.delivery_id, self,
        )
        try:
            self._on_message(message)
        except Exception:
            log.failure("on_message of the subscription to {queue} failed", queue=self.queue)

    def _acked(self, message: ReceivedMessage) -> None:
        if not self.active:
            return
        credit = 1
        if self.max_messages is not None:
            credit = max(0, min(1, self.max_messages - self._granted))
        self._granted += credit
        self._client._ack(self, message.delivery_id, credit)


class _ClientProtocol(Protocol):
    """
    Bytes ↔ frames for the client's connection; everything else is the
    L{Client}'s.
    """

    def __init__(self, client: "Client", max_frame_size: int) -> None:
        self._client = client
        self._decoder = FrameDecoder(frames=f.FROM_ROUTER, max_frame_size=max_frame_size)
        self._broken = False

    def connectionMade(self) -> None:
        self._client._connected(self.transport)

    def dataReceived(self, data: bytes) -> None:
        if self._broken:
            return
        try:
            frames = self._decoder.feed(data)
        except WireError as e:
            self._broken = True
            self._client._protocol_error(str(e))
            return
        received = self._client._received
        for frame in frames:
            received(frame)

    def connectionLost(self, reason=None) -> None:
        self._client._connection_lost(reason)


class Client:
    """
    One session with a router.  Made by L{connect}; the session lasts as
    long as the connection.

    @ivar router: the router's name.
    @ivar session_id: the session's id (from the router).
    @ivar client_id: what this client called itself.
    """

    def __init__(self, reactor: IReactorTime, client_id: str, ttl_ms: int = DEFAULT_TTL_MS,
                 max_frame_size: int = f.MAX_FRAME_SIZE) -> None:
        self.client_id = client_id
        self.ttl_ms = ttl_ms
        self.router: str | None = None
        self.session_id: str | None = None
        self._reactor = reactor
        self._max_frame_size = max_frame_size
        self._transport = None
        self._state = "connecting"
        self._opened: Deferred = Deferred()
        self._open_timer = None
        self._commands = itertools.count(1)
        self._pending: dict[int, tuple[str, Deferred, object]] = {}
        self._subscriptions: dict[int, Subscription] = {}
        self._subscription_numbers = itertools.count(1)
        self._pings: dict[int, tuple[Deferred, float]] = {}
        self._ping_numbers = itertools.count(1)
        self._acks: list[int] = []
        self._credit: dict[Subscription, int] = {}
        self._flush_call = None
        self._close_waiters: list[Deferred] = []
        self._end: ClientError | None = None

    # -- public -----------------------------------------------------------------

    def send(self, address: str, body: bytes, headers: dict | None = None,
             persistent: bool = True) -> Deferred:
        """
        Send C{body} to C{address} (C{queue@router}, or a bare C{queue} of
        this router).

        @return: Deferred firing with the message id once the router
            accepted it (durably, when C{persistent}); failing with
            L{SendError} if the router refused it, or L{SessionError}.
        @raise TypeError: C{body} is not bytes, or C{headers} does not map
            strings to strings.
        """
        if isinstance(body, (bytearray, memoryview)):
            body = bytes(body)
        if type(body) is not bytes:
            raise TypeError(f"body must be bytes, not {type(body).__name__}")
        headers = {} if headers is None else dict(headers)
        if not all(type(k) is str and type(v) is str for k, v in headers.items()):
            raise TypeError("headers must map strings to strings")
        if self._state != "open":
            return fail(self._unusable())
        command_id = next(self._commands)
        d = Deferred()
        self._pending[command_id] = ("send", d, None)
        self._write(f.Send(command_id, address, headers, body, bool(persistent)))
        return d

    def subscribe(self, queue: str, on_message: Callable[[ReceivedMessage], None],
                  prefetch: int = 100, max_messages: int | None = None) -> Deferred:
        """
        Consume from C{queue} of this router: C{on_message(message)} is
        called for each message, which the application acknowledges with
        C{message.ack()}.

        @param prefetch: most messages delivered and not yet acknowledged.
        @param max_messages: stop asking for messages after this many.
        @return: Deferred firing with a L{Subscription} once the router
            confirmed; failing with L{SubscribeError} (e.g. C{bad-address})
            or L{SessionError}.
        """
        if prefetch < 1:
            raise ValueError("prefetch must be at least 1")
        if max_messages is not None and max_messages < 0:
            raise ValueError("max_messages must not be negative")
        if self._state != "open":
            return fail(self._unusable())
        number = next(self._subscription_numbers)
        subscription = Subscription(self, number, queue, on_message, prefetch, max_messages)
        self._subscriptions[number] = subscription
        command_id = next(self._commands)
        d = Deferred()
        self._pending[command_id] = ("subscribe", d, subscription)
        self._write(f.Subscribe(command_id, number, queue, subscription.initial_credit()))
        return d

    def ping(self) -> Deferred:
        """
        @return: Deferred firing with the round-trip time in seconds.
        """
        if self._state not in ("open", "closing"):
            return fail(self._unusable())
        n = next(self._ping_numbers)
        d = Deferred()
        self._pings[n] = (d, self._reactor.seconds())
        self._write(f.Ping(n))
        return d

    def close(self) -> Deferred:
        """
        End the session: the router finishes the commands in progress
        (so every send made before fires first), puts unacknowledged
        messages back, and closes.  Fires when the connection is closed.
        """
        if self._state == "closed":
            return succeed(None)
        d = self.when_closed()
        d.addErrback(lambda failure: None)
        if self._state in ("connecting", "opening", "broken"):
            if self._transport is not None:
                self._transport.abortConnection()
        elif self._state == "open":
            self._flush()
            self._state = "closing"
            for subscription in self._subscriptions.values():
                subscription.active = False
            self._write(f.Close(next(self._commands)))
        return d

    def when_closed(self) -> Deferred:
        """
        @return: Deferred firing with None when the session ends by
            L{close}, or failing with L{SessionError} when it ends
            otherwise.
        """
        if self._state == "closed":
            return fail(self._end) if self._end is not None else succeed(None)
        d = Deferred()
        self._close_waiters.append(d)
        return d

    # -- from the protocol --------------------------------------------------------

    def _connected(self, transport) -> None:
        self._transport = transport
        self._state = "opening"
        self._write(f.Open(list(f.SUPPORTED_VERSIONS), self.client_id, "", self.ttl_ms))

    def _received(self, frame) -> None:
        if self._state in ("broken", "closed", "closed-by-router"):
            return
        handler = _HANDLERS.get((self._state, type(frame)))
        if handler is None:
            self._protocol_error(f"unexpected {type(frame).__name__} while {self._state}")
            return
        handler(self, frame)

    def _on_opened(self, frame: f.Opened) -> None:
        self.router = frame.router
        self.session_id = frame.session_id
        self.ttl_ms = frame.ttl_ms
        self._state = "open"
        self._cancel_open_timer()
        self._opened.callback(self)

    def _on_confirm(self, frame: f.Confirm) -> None:
        pending = self._pending.pop(frame.command_id, None)
        if pending is None:
            self._protocol_error(f"Confirm for unknown command {frame.command_id}")
            return
        kind, d, subscription = pending
        if kind == "send":
            d.callback(frame.msg_id)
        elif kind == "subscribe":
            d.callback(subscription)
        else:
            d.callback(None)

    def _on_error(self, frame: f.Error) -> None:
        if frame.command_id == 0:
            # The router is closing the connection for this reason.
            self._end = SessionError(frame.code, frame.detail)
            return
        pending = self._pending.pop(frame.command_id, None)
        if pending is None:
            log.warn("router refused command {command}: {code} {detail}",
                     command=frame.command_id, code=frame.code, detail=frame.detail)
            return
        kind, d, subscription = pending
        if kind == "send":
            d.errback(SendError(frame.code, frame.detail))
        else:
            if kind == "subscribe":
                subscription.active = False
                self._subscriptions.pop(subscription.number, None)
            d.errback(SubscribeError(frame.code, frame.detail))

    def _on_deliver(self, frame: f.Deliver) -> None:
        subscription = self._subscriptions.get(frame.subscription)
        if subscription is not None and subscription.active:
            subscription._delivered(frame)
        # Otherwise it is being cancelled: the router gives the message
        # back to the queue.

    def _on_ping(self, frame: f.Ping) -> None:
        self._write(f.Pong(frame.n))

    def _on_pong(self, frame: f.Pong) -> None:
        waiting = self._pings.pop(frame.n, None)
        if waiting is not None:
            d, sent_at = waiting
            d.callback(self._reactor.seconds() - sent_at)

    def _on_closed(self, frame: f.Closed) -> None:
        self._state = "closed-by-router"
        self._transport.loseConnection()

    def _protocol_error(self, detail: str) -> None:
        log.warn("router {router} broke the client protocol: {detail}",
                 router=self.router or "?", detail=detail)
        if self._end is None:
            self._end = SessionError(f.PROTOCOL_ERROR, detail)
        self._state = "broken"
        self._transport.abortConnection()

    def _connection_lost(self, reason) -> None:
        orderly = self._state == "closed-by-router"
        self._state = "closed"
        self._cancel_open_timer()
        if self._flush_call is not None and self._flush_call.active():
            self._flush_call.cancel()
        if self._end is None and not orderly:
            why = reason.getErrorMessage() if reason is not None else "connection closed"
            self._end = SessionError(CONNECTION_LOST, why)
        end = self._end or SessionError(CLOSED, "the client was closed")
        pending, self._pending = self._pending, {}
        for _kind, d, _ in pending.values():
            d.errback(end)
        pings, self._pings = self._pings, {}
        for d, _ in pings.values():
            d.errback(end)
        for subscription in self._subscriptions.values():
            subscription.active = False
        if not self._opened.called:
            self._opened.errback(end)
        waiters, self._close_waiters = self._close_waiters, []
        for d in waiters:
            if self._end is None:
                d.callback(None)
            else:
                d.errback(self._end)

    # -- inside ---------------------------------------------------------------

    def _write(self, frame) -> None:
        self._transport.write(encode(frame))

    def _unusable(self) -> ClientError:
        if self._end is not None:
            return self._end
        return SessionError(CLOSED, f"the client is {self._state}")

    def _unsubscribe(self, subscription: Subscription) -> Deferred:
        self._credit.pop(subscription, None)
        if self._state != "open":
            return succeed(None)
        self._flush()
        command_id = next(self._commands)
        d = Deferred()
        self._pending[command_id] = ("unsubscribe", d, subscription)
        self._write(f.Unsubscribe(command_id, subscription.number))
        d.addCallback(self._unsubscribed, subscription)
        return d

    def _unsubscribed(self, _, subscription: Subscription) -> None:
        self._subscriptions.pop(subscription.number, None)

    def _ack(self, subscription: Subscription, delivery_id: int, credit: int) -> None:
        if self._state != "open":
            return
        self._acks.append(delivery_id)
        if credit:
            self._credit[subscription] = self._credit.get(subscription, 0) + credit
        if self._flush_call is None or not self._flush_call.active():
            self._flush_call = self._reactor.callLater(0, self._flush)

    def _flush(self) -> None:
        """
        Send the acknowledgements of this turn in one Ack, then the credit
        they make room for.
        """
        if self._flush_call is not None and self._flush_call.active():
            self._flush_call.cancel()
        self._flush_call = None
        if self._state != "open":
            return
        if self._acks:
            acks, self._acks = self._acks, []
            self._write(f.Ack(next(self._commands), acks))
        credit, self._credit = self._credit, {}
        for subscription, n in credit.items():
            if subscription.active:
                self._write(f.Credit(next(self._commands), subscription.number, n))

    def _cancel_open_timer(self) -> None:
        if self._open_timer is not None and self._open_timer.active():
            self._open_timer.cancel()
        self._open_timer = None


_HANDLERS = {
    ("opening", f.Opened): Client._on_opened,
    ("opening", f.Error): Client._on_error,
    ("opening", f.Ping): Client._on_ping,
}
for _state in ("open", "closing"):
    _HANDLERS.update({
        (_state, f.Confirm): Client._on_confirm,
        (_state, f.Error): Client._on_error,
        (_state, f.Deliver): Client._on_deliver,
        (_state, f.Ping): Client._on_ping,
        (_state, f.Pong): Client._on_pong,
    })
_HANDLERS[("closing", f.Closed)] = Client._on_closed


def _default_client_id() -> str:
    return f"meshroute-{os.getpid()}"


def connect_endpoint(reactor: IReactorTime, endpoint, client_id: str | None = None,
                     ttl_ms: int = DEFAULT_TTL_MS, timeout: float = OPEN_TIMEOUT_S,
                     max_frame_size: int = f.MAX_FRAME_SIZE) -> Deferred:
    """
    Like L{connect}, with an C{IStreamClientEndpoint}.
    """
    client = Client(reactor, client_id if client_id is not None else _default_client_id(),
                    ttl_ms, max_frame_size)
    protocol = _ClientProtocol(client, max_frame_size)
    connecting = connectProtocol(endpoint, protocol)

    def connected(_):
        client._open_timer = reactor.callLater(timeout, timed_out)
        return client._opened

    def timed_out():
        client._end = SessionError(TIMEOUT, f"no answer to Open within {timeout} s")
        client._transport.abortConnection()

    def failed(failure):
        if failure.check(ClientError):
            return failure
        raise SessionError(CONNECTION_LOST, failure.getErrorMessage())

    connecting.addCallback(connected)
    connecting.addErrback(failed)
    return connecting


def connect(reactor, endpoint_string: str, client_id: str | None = None,
            ttl_ms: int = DEFAULT_TTL_MS, timeout: float = OPEN_TIMEOUT_S) -> Deferred:
    """
    Connect to a router's client listener and open a session.

    @param reactor: the reactor (an C{IReactorTime} that can connect).
    @param endpoint_string: a Twisted client endpoint string, e.g.
        C{"tcp:127.0.0.1:6001"} or C{"tls:router.example:6001"}.
    @param client_id: how the router will name this client in logs and
        the admin API (default: C{meshroute-PID}).
    @param ttl_ms: the connection TTL asked for (-1: never).
    @param timeout: seconds to wait for the router's answer once
        connected.
    @return: Deferred firing with a L{Client}; failing with
        L{SessionError} if the connection or the session cannot be made.
    """
    return connect_endpoint(reactor, clientFromString(reactor, endpoint_string), client_id,
                            ttl_ms, timeout)


def describe_body(body: bytes) -> dict:
    """
    A body as JSON wants it: C{{"body": text}} when it is UTF-8, else
    C{{"body": base64, "encoding": "base64"}}.
    """
    try:
        return {"body": body.decode("utf-8")}
    except UnicodeDecodeError:
        return {"body": base64.b64encode(body).decode("ascii"), "encoding": "base64"}
