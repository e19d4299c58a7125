"""
The router's side of one client session, as an Automat machine.

A session goes C{awaiting_open → vetting_open → open → draining →
closing → closed}.  Every frame is an input; a frame the current state has
no transition for raises C{NoTransition} before any behaviour runs, and the
protocol turns that into C{Error(0, "bad-command")} and a close, so a Send
before Open, a second Open or anything after Close cannot change state.

For now a session lives exactly as long as its connection: when the
connection goes, its subscriptions are cancelled (their unacknowledged
deliveries go back to their queues, flagged redelivered) and commands
still in progress finish without anyone to tell.  Reattachment (issue 4)
will add a C{disconnected} state between C{open} and C{closed}, entered on
C{connection_lost}, left on a matching Open or when keep-alive expires;
the command ids and C{last_command_id} it needs are already on the wire.

The machine holds no data: L{SessionCore} keeps the session's state and
does its I/O; docs/client-protocol.md narrates the same from the wire.
"""

import uuid
from dataclasses import dataclass, field
from typing import Protocol

from automat import TypeMachineBuilder
from twisted.internet.defer import maybeDeferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime, ITransport
from twisted.logger import Logger

from meshroute.clients import frames as f
from meshroute.errors import MeshrouteError
from meshroute.messages import DEAD_LETTER_QUEUE, QUEUE_NAME
from meshroute.wire.codec import encode

log = Logger()

#: Sends in progress (submitted, not yet confirmed or refused) at which the
#: router stops reading from the connection, and the level at which it
#: reads again: a client that pipelines faster than the store commits is
#: slowed down by TCP instead of growing the router's memory.
MAX_SENDS_IN_PROGRESS = 8192
RESUME_SENDS_AT = MAX_SENDS_IN_PROGRESS // 2

#: How long a connection closed for an error may take to flush the Error
#: frame before it is aborted.
CLOSE_GRACE_S = 5.0

# Session states as the admin API shows them.
AWAITING_OPEN = "awaiting-open"
OPEN = "open"
CLOSING = "closing"
CLOSED = "closed"


class SessionInputs(Protocol):
    """
    Everything that can happen to a session.
    """

    def got_open(self, frame: f.Open) -> None:
        "The client asked for a session."

    def accepted(self) -> None:
        "The Open being vetted is acceptable."

    def refused(self, code: str, detail: str) -> None:
        "The Open being vetted is not; C{code} says why."

    def got_send(self, frame: f.Send) -> None:
        "The client sends a message."

    def got_subscribe(self, frame: f.Subscribe) -> None:
        "The client wants to consume from a queue."

    def got_unsubscribe(self, frame: f.Unsubscribe) -> None:
        "The client stops a subscription."

    def got_credit(self, frame: f.Credit) -> None:
        "The client grants a subscription more deliveries."

    def got_ack(self, frame: f.Ack) -> None:
        "The client is done with some deliveries."

    def got_ping(self, frame: f.Ping) -> None:
        "The client checks that we are alive."

    def got_pong(self, frame: f.Pong) -> None:
        "The client answered a ping."

    def got_close(self, frame: f.Close) -> None:
        "The client ends the session."

    def drained(self) -> None:
        "Every command received before Close has finished."

    def protocol_error(self, code: str, detail: str) -> None:
        """
        The client sent bytes that are not a frame (C{protocol-error}) or a
        frame not allowed now (C{bad-command}).
        """

    def connection_lost(self) -> None:
        "The connection is gone."


class SessionRegistry:
    """
    The sessions of one client listener, for the admin API (and, with
    issue 4, for reattachment by session id).
    """

    def __init__(self) -> None:
        self.sessions: dict[str, "SessionCore"] = {}

    def add(self, core: "SessionCore") -> None:
        self.sessions[core.session_id] = core

    def remove(self, core: "SessionCore") -> None:
        if self.sessions.get(core.session_id) is core:
            del self.sessions[core.session_id]

    def describe(self) -> list[dict]:
        """
        C{GET /api/v1/sessions}.
        """
        return [core.describe() for core in self.sessions.values()]


@dataclass(frozen=True)
class SessionSettings:
    """
    The client listener's side of the contract.

    @ivar connection_ttl_override: -1 lets each client choose its TTL;
        otherwise the TTL every session gets.
    """

    connection_ttl_override: int = -1


@dataclass
class SessionCore:
    """
    The data of one session and the I/O its behaviours perform.

    @ivar last_command_id: the id of the last command received; the next
        must be one more.
    @ivar owners: delivery id → subscription id, for every delivery not
        yet acknowledged, so an Ack can name deliveries of several
        subscriptions.
    @ivar sends_in_progress: Sends submitted to the engine and not yet
        answered.
    @ivar acks_in_progress: Acks whose deletions are not yet durable.
    """

    engine: object
    transport: ITransport
    clock: IReactorTime
    registry: SessionRegistry
    settings: SessionSettings = field(default_factory=SessionSettings)
    machine: SessionInputs | None = None
    state: str = AWAITING_OPEN
    session_id: str = ""
    client_id: str = ""
    ttl_ms: int = -1
    version: int = 0
    last_command_id: int = 0
    subscriptions: dict = field(default_factory=dict)
    owners: dict = field(default_factory=dict)
    sends_in_progress: int = 0
    acks_in_progress: int = 0
    connected: bool = True
    silent: bool = False
    paused: bool = False
    _abort_call: IDelayedCall | None = None

    # -- output ---------------------------------------------------------------

    def write(self, frame) -> None:
        """
        Send C{frame}, unless the connection is gone or its last frame
        (Closed, or a connection-level Error) was sent.
        """
        if self.connected and not self.silent:
            self.transport.write(encode(frame))

    # -- opening ----------------------------------------------------------------

    def vet_open(self, frame: f.Open) -> tuple[str, str] | None:
        common = set(frame.versions) & set(f.SUPPORTED_VERSIONS)
        if not common:
            return f.UNSUPPORTED_VERSION, f"this router speaks {list(f.SUPPORTED_VERSIONS)}"
        if frame.ttl_ms < -1:
            return f.BAD_COMMAND, "ttl_ms must be -1 (never) or at least 0"
        self.version = max(common)
        self.client_id = frame.client_id
        override = self.settings.connection_ttl_override
        self.ttl_ms = frame.ttl_ms if override == -1 else override
        return None

    def open(self) -> None:
        """
        Start a new session.  A session id the client asks to resume is
        not known (sessions do not outlive their connection yet): it gets
        a new one, with C{reattached} false, and recreates its state.
        """
        self.session_id = uuid.uuid4().hex
        self.state = OPEN
        self.registry.add(self)
        self.write(f.Opened(self.version, self.session_id, self.engine.name, self.ttl_ms,
                            False, 0))
        log.info("client session {session} opened for {client}",
                 session=self.session_id, client=self.client_id or "(anonymous)")

    # -- commands ---------------------------------------------------------------

    def in_sequence(self, inputs: SessionInputs, frame) -> bool:
        """
        Check that C{frame}'s command id is the next one; if not, the
        client and router disagree about the session and it must end.
        """
        expected = self.last_command_id + 1
        if frame.command_id != expected:
            inputs.protocol_error(
                f.BAD_COMMAND,
                f"{type(frame).__name__} has command id {frame.command_id}, expected {expected}",
            )
            return False
        self.last_command_id = expected
        return True

    def send(self, frame: f.Send) -> None:
        command_id = frame.command_id
        d = maybeDeferred(
            self.engine.submit, frame.address, frame.body, frame.headers, frame.persistent
        )
        self.sends_in_progress += 1
        if self.sends_in_progress >= MAX_SENDS_IN_PROGRESS and not self.paused:
            self.paused = True
            self.transport.pauseProducing()
        d.addCallbacks(self._sent, self._send_failed, (command_id,), None, (command_id,))

    def _sent(self, msg_id: str, command_id: int) -> None:
        self.write(f.Confirm(command_id, msg_id))
        self._send_done()

    def _send_failed(self, failure, command_id: int) -> None:
        self._refuse(command_id, failure, "send")
        self._send_done()

    def _send_done(self) -> None:
        self.sends_in_progress -= 1
        if self.paused and self.sends_in_progress <= RESUME_SENDS_AT:
            self.paused = False
            if self.connected and not self.silent:
                self.transport.resumeProducing()
        self._check_drained()

    def _refuse(self, command_id: int, failure, doing: str) -> None:
        error = failure.value
        code = getattr(error, "code", None)
        if isinstance(error, MeshrouteError) and type(code) is str:
            self.write(f.Error(command_id, code, str(error)))
        else:
            log.failure("client session {session}: {doing} failed", failure,
                        session=self.session_id, doing=doing)
            self.write(f.Error(command_id, f.INTERNAL_ERROR, f"{doing} failed in the router"))

    def subscribe(self, frame: f.Subscribe) -> None:
        queue, number = frame.queue, frame.subscription
        if not (QUEUE_NAME.match(queue) or queue == DEAD_LETTER_QUEUE):
            self.write(f.Error(frame.command_id, f.BAD_ADDRESS, f"invalid queue name {queue!r}"))
            return
        if frame.credit < 0:
            self.write(f.Error(frame.command_id, f.INVALID_ARGUMENT,
                               "credit must not be negative"))
            return
        if number in self.subscriptions:
            self.write(f.Error(frame.command_id, f.INVALID_ARGUMENT,
                               f"subscription {number} is already in use"))
            return
        # Confirm first: deliveries may start inside queues.subscribe.
        self.write(f.Confirm(frame.command_id, ""))
        owners, write = self.owners, self.write

        def deliver(delivery) -> None:
            owners[delivery.delivery_id] = number
            m = delivery.message
            write(f.Deliver(delivery.delivery_id, number, m.msg_id, m.origin, m.headers, m.body,
                            delivery.redelivered))

        self.subscriptions[number] = self.engine.queues.subscribe(queue, deliver, frame.credit)

    def unsubscribe(self, frame: f.Unsubscribe) -> None:
        subscription = self.subscriptions.pop(frame.subscription, None)
        if subscription is None:
            self.write(f.Error(frame.command_id, f.INVALID_ARGUMENT,
                               f"no subscription {frame.subscription}"))
            return
        self._cancel(frame.subscription, subscription)
        self.write(f.Confirm(frame.command_id, ""))

    def _cancel(self, number: int, subscription) -> None:
        subscription.cancel()
        owners = self.owners
        for delivery_id in [d for d, owner in owners.items() if owner == number]:
            del owners[delivery_id]

    def credit(self, frame: f.Credit) -> None:
        if frame.n < 1:
            self.write(f.Error(frame.command_id, f.INVALID_ARGUMENT, "credit must be at least 1"))
            return
        subscription = self.subscriptions.get(frame.subscription)
        # Credit racing an Unsubscribe is harmless: ignored.
        if subscription is not None:
            subscription.add_credit(frame.n)

    def ack(self, frame: f.Ack) -> None:
        by_subscription: dict[int, list[int]] = {}
        owners = self.owners
        for delivery_id in frame.delivery_ids:
            number = owners.pop(delivery_id, None)
            if number is not None:
                by_subscription.setdefault(number, []).append(delivery_id)
        for number, delivery_ids in by_subscription.items():
            self.acks_in_progress += 1
            d = self.subscriptions[number].ack(delivery_ids)
            d.addErrback(lambda failure: log.failure(
                "client session {session}: acknowledging failed", failure,
                session=self.session_id))
            d.addBoth(self._ack_done)

    def _ack_done(self, _) -> None:
        self.acks_in_progress -= 1
        self._check_drained()

    def pong(self, frame: f.Ping) -> None:
        self.write(f.Pong(frame.n))

    # -- closing ----------------------------------------------------------------

    def begin_close(self) -> None:
        """
        Close received: stop consuming now, and answer once every command
        in progress is done.
        """
        self.state = CLOSING
        self._cancel_all()
        self._check_drained()

    def _check_drained(self) -> None:
        if (self.state == CLOSING and self.connected and self.machine is not None
                and not self.sends_in_progress and not self.acks_in_progress):
            self.machine.drained()

    def closed(self) -> None:
        self.write(f.Closed())
        self.silent = True
        self.registry.remove(self)
        self.transport.loseConnection()
        log.info("client session {session} closed by the client", session=self.session_id)

    def fail(self, code: str, detail: str) -> None:
        """
        End the connection for a connection-level error: tell the client,
        flush, and abort if the flush takes too long.
        """
        log.warn("client session {session} ({client}): {code}: {detail}",
                 session=self.session_id or "-", client=self.client_id or "-",
                 code=code, detail=detail)
        self.state = CLOSING
        self._cancel_all()
        self.write(f.Error(0, code, detail))
        self.silent = True
        self.transport.loseConnection()
        self._abort_call = self.clock.callLater(CLOSE_GRACE_S, self.transport.abortConnection)

    def finish(self) -> None:
        """
        The connection is gone: the session goes with it.
        """
        self.connected = False
        self.state = CLOSED
        self._cancel_all()
        self.registry.remove(self)
        if self._abort_call is not None and self._abort_call.active():
            self._abort_call.cancel()

    def _cancel_all(self) -> None:
        subscriptions, self.subscriptions = self.subscriptions, {}
        for subscription in subscriptions.values():
            subscription.cancel()
        self.owners.clear()

    def describe(self) -> dict:
        """
        The session as the admin API shows it.  C{queued} (messages held
        for a disconnected session) is always 0 until sessions outlive
        their connections.
        """
        return {
            "session_id": self.session_id,
            "client_id": self.client_id,
            "state": self.state,
            "ttl_ms": self.ttl_ms,
            "queued": 0,
            "subscriptions": len(self.subscriptions),
            "unacknowledged": len(self.owners),
            "last_command_id": self.last_command_id,
        }


def _build_session_machine():
    builder = TypeMachineBuilder(SessionInputs, SessionCore)
    awaiting_open = builder.state("awaiting_open")
    vetting_open = builder.state("vetting_open")
    open_ = builder.state("open")
    draining = builder.state("draining")
    closing = builder.state("closing")
    closed = builder.state("closed")

    @awaiting_open.upon(SessionInputs.got_open).to(vetting_open)
    def check_open(inputs: SessionInputs, core: SessionCore, frame: f.Open) -> None:
        verdict = core.vet_open(frame)
        if verdict is None:
            inputs.accepted()
        else:
            inputs.refused(*verdict)

    @vetting_open.upon(SessionInputs.accepted).to(open_)
    def start(inputs: SessionInputs, core: SessionCore) -> None:
        core.open()

    @vetting_open.upon(SessionInputs.refused).to(closing)
    def refuse(inputs: SessionInputs, core: SessionCore, code: str, detail: str) -> None:
        core.fail(code, detail)

    @open_.upon(SessionInputs.got_send).loop()
    def send(inputs: SessionInputs, core: SessionCore, frame: f.Send) -> None:
        if core.in_sequence(inputs, frame):
            core.send(frame)

    @open_.upon(SessionInputs.got_subscribe).loop()
    def subscribe(inputs: SessionInputs, core: SessionCore, frame: f.Subscribe) -> None:
        if core.in_sequence(inputs, frame):
            core.subscribe(frame)

    @open_.upon(SessionInputs.got_unsubscribe).loop()
    def unsubscribe(inputs: SessionInputs, core: SessionCore, frame: f.Unsubscribe) -> None:
        if core.in_sequence(inputs, frame):
            core.unsubscribe(frame)

    @open_.upon(SessionInputs.got_credit).loop()
    def credit(inputs: SessionInputs, core: SessionCore, frame: f.Credit) -> None:
        if core.in_sequence(inputs, frame):
            core.credit(frame)

    @open_.upon(SessionInputs.got_ack).loop()
    def ack(inputs: SessionInputs, core: SessionCore, frame: f.Ack) -> None:
        if core.in_sequence(inputs, frame):
            core.ack(frame)

    @open_.upon(SessionInputs.got_close).to(draining)
    def close(inputs: SessionInputs, core: SessionCore, frame: f.Close) -> None:
        if core.in_sequence(inputs, frame):
            core.begin_close()

    @draining.upon(SessionInputs.drained).to(closing)
    def drained(inputs: SessionInputs, core: SessionCore) -> None:
        core.closed()

    for state in (open_, draining):

        @state.upon(SessionInputs.got_ping).loop()
        def ping(inputs: SessionInputs, core: SessionCore, frame: f.Ping) -> None:
            core.pong(frame)

        @state.upon(SessionInputs.got_pong).loop()
        def pong(inputs: SessionInputs, core: SessionCore, frame: f.Pong) -> None:
            pass

    for state in (awaiting_open, vetting_open, open_, draining):

        @state.upon(SessionInputs.protocol_error).to(closing)
        def protocol_error(inputs: SessionInputs, core: SessionCore, code: str,
                           detail: str) -> None:
            core.fail(code, detail)

    for state in (awaiting_open, vetting_open, open_, draining, closing):

        @state.upon(SessionInputs.connection_lost).to(closed)
        def lost(inputs: SessionInputs, core: SessionCore) -> None:
            core.finish()

    # Once we have decided to close, whatever else arrives is moot.
    for moot in (SessionInputs.got_open, SessionInputs.got_send, SessionInputs.got_subscribe,
                 SessionInputs.got_unsubscribe, SessionInputs.got_credit, SessionInputs.got_ack,
                 SessionInputs.got_ping, SessionInputs.got_pong, SessionInputs.got_close,
                 SessionInputs.protocol_error, SessionInputs.drained):
        closing.upon(moot).loop().returns(None)
    closed.upon(SessionInputs.drained).loop().returns(None)
    return builder.build()


#: Machine factory: C{SESSION_MACHINE(core)} returns the inputs object.
SESSION_MACHINE = _build_session_machine()
