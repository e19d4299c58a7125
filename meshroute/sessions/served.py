"""
The router's side of one client session, as an Automat machine.  A
session outlives its connections (docs/client-protocol.md, "Sessions that
survive failures").

    open ── connection_lost ──▶ disconnected ── keep_alive_expired ──▶ expired
     │ ▲                            │
     │ └────────── resumed ─────────┘
     ├── got_close ──▶ draining ── drained / connection_lost ──▶ closed
     └── failed ──────────────────────────────────────────────▶ closed

   (connection_lost of a session that stopped being resumable leads to
   expired at once; resumed there answers False: not resumed.)

 - C{open}: attached to a connection, awaiting commands.
 - C{disconnected}: the connection was lost without C{Close}; awaiting a
   resume within C{keep-alive}.  Subscriptions stay, deliveries for them
   queue in the session (up to C{max-depth}), commands in progress finish
   and their answers are kept.
 - C{draining}: C{Close} received; awaiting the commands in progress.
 - C{closed}: ended by C{Close} or a connection-level error; cannot be
   resumed.
 - C{expired}: C{keep-alive} passed while disconnected; cannot be resumed.

The connection (C{awaiting_hello → vetting → attached → closing →
gone}) is another, smaller machine, the same for every client protocol
(L{meshroute.sessions.lifecycle}); the native one
(L{meshroute.sessions.native_connection}) turns each command and C{Received}
frame into an input of the session's machine, and a frame the session's
state has no transition for (C{NoTransition}) into C{Error(0,
"bad-command")}.

What a session asks of its connection, whatever protocol it speaks:
C{write(frame)} (a native frame: C{Opened}, C{Confirm}, C{Confirmed},
C{Error}, C{Deliver}, C{DeliverBatch}, C{Processed}, C{Closed}...),
C{pause()} and C{resume()} (reading), C{opened(...)}, C{version} and
C{ttl_ms}, and its machine's C{protocol_error(code, detail)} and
C{session_ended()}.  A STOMP connection (L{meshroute.stomp.connection})
is such a connection of version 2: it translates the frames written to it
into STOMP, and starts its sessions not resumable (STOMP has no resume),
so a lost connection ends them.

What the session holds, and its bounds:

 - B{answers}: the C{Confirm}/C{Error} of every command whose receipt the
   client has not reported (C{Received.answered_up_to}), to re-send on
   resume.  A client that never reports them stops being resumable past
   L{MAX_HELD_ANSWERS} (its answers are then no longer held).
 - B{recovery}: the last C{recovery-buffer-size} deliveries written,
   forgotten once C{Received.delivered_up_to} covers them.
 - B{pending}: the session's own queue: what was delivered to the session
   while disconnected, or while connected and its transport is full (the
   client does not read), or behind those; bounded by C{max-depth} while
   disconnected and C{queue-depth} while connected, as
   L{meshroute.sessions.depth} says.  At the bound the session's
   subscriptions take no more persistent messages (they stay in their
   queue) and non-persistent ones are dropped as C{max-depth-policy} says.
 - B{owners}: every delivery not yet acknowledged, by session delivery id
   (ids are per session, from 1, increasing; they may skip numbers).

The machine holds no data: L{ServedSession} keeps the session's state and
does its I/O.  Its transaction (protocol version 2) is a machine of its
own, L{meshroute.sessions.transaction}: the session hands it every Send
and Ack, and it carries them out at once or holds them until the commit.
"""

import uuid
from collections import deque
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

from automat import NoTransition, TypeMachineBuilder
from twisted.internet.defer import DeferredList, maybeDeferred, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from meshroute import events as event_names
from meshroute.wire import client_frames as f
from meshroute.sessions.depth import SessionDepth
from meshroute.sessions.limits import ClientLimits
from meshroute.sessions.permissions import NotAllowed
from meshroute.sessions.transaction import TRANSACTION_MACHINE, TransactionCore
from meshroute.errors import MeshrouteError
from meshroute.expiry import expires_at, expiring_sends, now_ms
from meshroute.messages import DEAD_LETTER_QUEUE, EXPIRED_QUEUE, QUEUE_NAME, expires_ms
from meshroute.store import ExecutorStopped

log = Logger()

#: Sends in progress (submitted, not yet confirmed or refused) at which the
#: router stops reading from the connection, and the level at which it
#: reads again: a client that pipelines faster than the store commits is
#: slowed down by TCP instead of growing the router's memory.
MAX_SENDS_IN_PROGRESS = 8192
RESUME_SENDS_AT = MAX_SENDS_IN_PROGRESS // 2

#: Most deliveries in one DeliverBatch, and most bytes of bodies and
#: headers: a turn's deliveries past either go in the next frame, and a
#: delivery larger than the bytes goes as a Deliver of its own, so that a
#: frame to the client stays within L{f.MAX_ROUTER_FRAME_SIZE}.
DELIVER_BATCH_MAX_MESSAGES = 1000
DELIVER_BATCH_MAX_BYTES = 1024 * 1024

#: Answers held for a client that does not report receiving them
#: (C{Received}); past it the session can no longer be resumed.
MAX_HELD_ANSWERS = 2 * MAX_SENDS_IN_PROGRESS

# Session states as the admin API shows them.
OPEN = "open"
DISCONNECTED = "disconnected"
CLOSING = "closing"
CLOSED = "closed"
EXPIRED = "expired"

#: What a session's client speaks (its C{protocol}, in the admin API and
#: C{session.opened}).
NATIVE = "native"
STOMP = "stomp"

#: C{[clients.reconnect] max-depth-policy}: which non-persistent message a
#: full disconnected session drops.
DROP_OLDEST = "drop-oldest"
DROP_NEWEST = "drop-newest"
MAX_DEPTH_POLICIES = (DROP_OLDEST, DROP_NEWEST)


class ServedSessionInputs(Protocol):
    """
    Everything that can happen to a session.
    """

    def got_send(self, frame: f.Send) -> None:
        "The client sends a message."

    def got_send_batch(self, frame: f.SendBatch) -> None:
        "The client sends many messages (version 4)."

    def got_ack_through(self, frame: f.AckThrough) -> None:
        "The client is done with a subscription's deliveries up to one (version 4)."

    def got_subscribe(self, frame: f.Subscribe) -> None:
        "The client wants to consume from a queue."

    def got_unsubscribe(self, frame: f.Unsubscribe) -> None:
        "The client stops a subscription."

    def got_credit(self, frame: f.Credit) -> None:
        "The client grants a subscription more deliveries."

    def got_ack(self, frame: f.Ack) -> None:
        "The client is done with some deliveries."

    def got_close(self, frame: f.Close) -> None:
        "The client ends the session."

    def got_begin(self, frame: f.Begin) -> None:
        "The client starts a transaction."

    def got_commit(self, frame: f.Commit) -> None:
        "The client commits its transaction."

    def got_rollback(self, frame: f.Rollback) -> None:
        "The client rolls its transaction back."

    def got_received(self, frame: f.Received) -> None:
        "The client reports the answers and deliveries it holds."

    def drained(self) -> None:
        "Every command received before Close has finished."

    def connection_lost(self, reason: str) -> None:
        """
        The session's connection is gone without Close: C{reason} is
        C{connection-lost}, C{ttl} (silent for its TTL), C{frame-timeout}
        or C{buffers-full} (see L{meshroute.sessions.lifecycle}) or
        C{taken-over} (another connection resumed the session).
        """

    def resumed(self, connection, frame: f.Open) -> bool:
        """
        A new connection asked for this session.

        @return: whether it was resumed; False when taking it from its old
            connection ended it (it had stopped being resumable), and the
            connection gets a new session.
        """

    def keep_alive_expired(self) -> None:
        "The session stayed disconnected for keep-alive."

    def failed(self, code: str) -> None:
        "The connection ended for a connection-level error C{code}."


@dataclass(frozen=True)
class SessionSettings:
    """
    The client listener's side of the contract (C{[clients.listener]} and
    C{[clients.reconnect]}).

    @ivar connection_ttl_override: -1 lets each client choose its TTL;
        otherwise the TTL every connection gets (-1 from a client: never).
    @ivar connection_ttl_check_interval_ms: how often silent connections
        are looked for.
    @ivar keep_alive_ms: how long a disconnected session waits for a
        resume.
    @ivar max_depth: deliveries a disconnected session holds.
    @ivar queue_depth: deliveries a connected session holds beyond its
        transport (at most C{max_depth}; None: C{max_depth}).
    @ivar max_depth_policy: one of L{MAX_DEPTH_POLICIES}.
    @ivar recovery_buffer_size: deliveries kept to re-send on resume.
    @ivar limits: what one client may take (L{ClientLimits}).
    """

    connection_ttl_override: int = -1
    connection_ttl_check_interval_ms: int = 2000
    keep_alive_ms: int = 60000
    max_depth: int = 1000
    queue_depth: int | None = None
    max_depth_policy: str = DROP_OLDEST
    recovery_buffer_size: int = 64
    limits: ClientLimits = ClientLimits()


class SessionRegistry:
    """
    The sessions of one client listener: for the admin API, and to find a
    session to resume by its id.
    """

    def __init__(self) -> None:
        self.sessions: dict[str, "ServedSession"] = {}
        self._by_notice_id: dict[str, "ServedSession"] = {}

    def add(self, core: "ServedSession") -> None:
        self.sessions[core.session_id] = core
        self._by_notice_id[core.notice_id] = core

    def remove(self, core: "ServedSession") -> None:
        if self.sessions.get(core.session_id) is core:
            del self.sessions[core.session_id]
        if self._by_notice_id.get(core.notice_id) is core:
            del self._by_notice_id[core.notice_id]

    def resumable(self, session_id: str) -> "ServedSession | None":
        """
        The session C{session_id} if it can be resumed (open on another
        connection, or disconnected; a native one: STOMP has no resume).
        """
        core = self.sessions.get(session_id)
        if core is not None and core.state in (OPEN, DISCONNECTED) and core.protocol == NATIVE:
            return core
        return None

    def describe(self) -> list[dict]:
        """
        C{GET /api/v1/sessions}.
        """
        return [core.describe() for core in self.sessions.values()]

    def expired_notice(self, notice_id: str, msg_id: str, address: str, router: str) -> bool:
        """
        Message C{msg_id} that the session of C{notice_id}
        (L{ServedSession.notice_id}) sent to C{address} expired at
        C{router}: tell the session, if it is here and not ended.  Returns
        whether it was.
        """
        core = self._by_notice_id.get(notice_id)
        if core is None or core.state not in (OPEN, DISCONNECTED):
            return False
        core.expired_notice(f.Expired(msg_id, address, router))
        return True


class _NoEvents:
    def emit(self, event: str, **fields) -> None:
        pass


NO_EVENTS = _NoEvents()


@dataclass(eq=False)
class ServedSession:
    """
    The data of one session and the I/O its behaviours perform.

    @ivar connection: the L{meshroute.sessions.lifecycle.ConnectionCore}
        the session is attached to, or None while disconnected (or ended).
    @ivar last_command_id: the id of the last command received; the next
        must be one more.
    @ivar processed_up_to: every command up to it has been carried out
        (what C{Processed} reports).
    @ivar answers: command id → its answer, until the client reports
        holding it.
    @ivar owners: session delivery id → C{(subscription, queue delivery
        id, persistent)} for every delivery not yet acknowledged.
    @ivar recovery: the last deliveries written (C{Deliver} frames).
    @ivar pending: C{Deliver} frames taken while disconnected (or while
        the transport was full), not yet written.
    @ivar depth: the bound of C{pending} in force (L{SessionDepth}).
    @ivar notice_id: what the messages this session sends asking for an
        expiry notice name it by (their header C{x-notify-expiry}): not
        its id, which would let any consumer of them resume the session.
    @ivar notices: C{Expired} notices that came while disconnected (at
        most C{max-depth}, the oldest dropped first), written on resume.
    @ivar sends_in_progress: Sends submitted to the engine and not yet
        answered.
    @ivar acks_in_progress: Acks whose deletions are not yet durable.
    @ivar transaction: the session's transaction machine (its inputs).
    @ivar commits_in_progress: Commits not yet durable (or failed).
    @ivar user: the authenticated user that opened the session (None on
        a listener without C{[security]}): only that user resumes it.
    @ivar guard: the user's permission checks
        (L{meshroute.sessions.permissions.Guard}), or None: everything is
        allowed.
    @ivar protocol: what its client speaks: L{NATIVE}, or L{STOMP} (a
        L{meshroute.stomp.connection} adapter feeds it native commands).
    """

    engine: object
    clock: IReactorTime
    registry: SessionRegistry
    settings: SessionSettings = field(default_factory=SessionSettings)
    events: object = NO_EVENTS
    machine: ServedSessionInputs | None = None
    connection: object = None
    state: str = OPEN
    session_id: str = ""
    client_id: str = ""
    user: str | None = None
    guard: object = None
    protocol: str = NATIVE
    ttl_ms: int = -1
    last_command_id: int = 0
    processed_up_to: int = 0
    answers: dict = field(default_factory=dict)
    subscriptions: dict = field(default_factory=dict)
    owners: dict = field(default_factory=dict)
    recovery: deque = field(default_factory=deque)
    pending: deque = field(default_factory=deque)
    notices: deque = field(default_factory=deque)
    depth: SessionDepth | None = None
    notice_id: str = ""
    next_delivery_id: int = 0
    sends_in_progress: int = 0
    acks_in_progress: int = 0
    transaction: object = None
    commits_in_progress: int = 0
    paused: bool = False
    holding: bool = False
    resumable: bool = True
    disconnected_at: float | None = None
    batching: bool = False
    _batches: dict = field(default_factory=dict)
    _batch_bytes: int = 0
    _batch_count: int = 0
    _batch_call: IDelayedCall | None = None
    _done_above: set = field(default_factory=set)
    _processed_sent: int = 0
    _processed_call: IDelayedCall | None = None
    _keep_alive_call: IDelayedCall | None = None

    def __post_init__(self) -> None:
        settings = self.settings
        self.depth = SessionDepth(
            settings.max_depth if settings.queue_depth is None else settings.queue_depth,
            settings.max_depth)
        self.recovery = deque(maxlen=settings.recovery_buffer_size)
        self._transaction = TransactionCore(self)
        self.transaction = TRANSACTION_MACHINE(self._transaction)

    # -- output ---------------------------------------------------------------

    def write(self, frame) -> None:
        """
        Send C{frame} on the session's connection, if it has one, after
        the deliveries of this turn not yet written (so that frames keep
        the order in which they were made).
        """
        if self._batches:
            self._write_batches()
        if self.connection is not None:
            self.connection.write(frame)

    def answer(self, command_id: int, frame, done: bool = True) -> None:
        """
        Send the answer of a command, hold it until the client reports
        holding it, and count the command as carried out (unless C{done}
        is false: a Send a transaction held was carried out when held).
        """
        if self.resumable:
            answers = self.answers
            answers[command_id] = frame
            if len(answers) > MAX_HELD_ANSWERS:
                self._not_resumable(f"more than {MAX_HELD_ANSWERS} answers were not reported "
                                    "received")
        self.write(frame)
        if done:
            self.done(command_id)

    def done(self, command_id: int) -> None:
        """
        Command C{command_id} has been carried out: C{Processed} covers it
        once every command before it is done too.
        """
        if command_id != self.processed_up_to + 1:
            self._done_above.add(command_id)
            return
        above = self._done_above
        n = command_id
        while n + 1 in above:
            n += 1
            above.discard(n)
        self.processed_up_to = n
        self._schedule_processed()

    def done_through(self, first: int, last: int) -> None:
        """
        Commands C{first} to C{last} (a batch) have been carried out.
        """
        if first != self.processed_up_to + 1:
            self._done_above.update(range(first, last + 1))
            return
        self.processed_up_to = first - 1
        self._done_above.update(range(first + 1, last + 1))
        self.done(first)

    def _schedule_processed(self) -> None:
        if self._processed_call is None and self.connection is not None:
            self._processed_call = self.clock.callLater(0, self._send_processed)

    def _send_processed(self) -> None:
        self._processed_call = None
        if self.connection is not None and self.processed_up_to > self._processed_sent:
            self._processed_sent = self.processed_up_to
            self.write(f.Processed(self.processed_up_to))

    def _not_resumable(self, why: str) -> None:
        log.warn("client session {session} ({client}) can no longer be resumed: {why}",
                 session=self.session_id, client=self.client_id or "-", why=why)
        self.resumable = False
        self.answers.clear()
        self.recovery.clear()

    # -- opening ----------------------------------------------------------------

    def start(self, connection, frame: f.Open) -> None:
        """
        A new session on C{connection}.  C{frame.session_id}, when set,
        named a session that cannot be resumed: the client recreates its
        state.
        """
        self.session_id = uuid.uuid4().hex
        self.notice_id = uuid.uuid4().hex
        self.connection = connection
        self.batching = connection.version >= f.BATCH_VERSION
        self.client_id = frame.client_id
        self.ttl_ms = connection.ttl_ms
        self.state = OPEN
        self.registry.add(self)
        self.write(connection.opened(self.session_id, self.engine.name, self.ttl_ms, False, 0))
        self.events.emit(event_names.SESSION_OPENED, session_id=self.session_id,
                         client_id=self.client_id, ttl_ms=self.ttl_ms, protocol=self.protocol)
        if frame.session_id:
            self.events.emit(event_names.SESSION_RECREATED, session_id=self.session_id,
                             client_id=self.client_id, requested_session_id=frame.session_id)
            log.info("client session {requested} asked for by {client} is gone; new session "
                     "{session}", requested=frame.session_id, client=self.client_id or "-",
                     session=self.session_id)
        else:
            log.info("client session {session} opened for {client}",
                     session=self.session_id, client=self.client_id or "(anonymous)")

    # -- commands ---------------------------------------------------------------

    def accept_command(self, frame, replayable: bool = True) -> bool:
        """
        Whether C{frame} is the next command, to carry out.  A command the
        session already received (a client replaying after a resume) is
        not carried out again: its held answer, if any, is re-sent.  Any
        other id (or a replayed Close, which cannot be: the session would
        be closing) means client and router disagree about the session: a
        connection-level C{bad-command}.
        """
        command_id = frame.command_id
        if command_id == self.last_command_id + 1:
            self.last_command_id = command_id
            return True
        if replayable and 1 <= command_id <= self.last_command_id:
            held = self.answers.get(command_id)
            if held is not None:
                self.write(held)
            return False
        self.connection.machine.protocol_error(
            f.BAD_COMMAND,
            f"{type(frame).__name__} has command id {command_id}, "
            f"expected {self.last_command_id + 1}",
        )
        return False

    # The data commands.  The machine's behaviours for them in C{open} are
    # these methods, and the connection's protocol calls them directly
    # while the session is open (L{HOT_FRAMES}): the machine stays the
    # authority for every change of stage (C{state} is set by its
    # behaviours only), and the transaction machine's for Begin, Commit
    # and Rollback (C{TransactionCore.holding}, likewise).

    def take_send(self, frame: f.Send) -> None:
        if self.accept_command(frame):
            if self.guard is not None and not self.guard.may_send(frame.address):
                self.refuse_send(frame.command_id, frame.address)
            elif self._transaction.holding:
                self.transaction.send(frame)
            else:
                self.send(frame)

    def take_send_batch(self, frame: f.SendBatch) -> None:
        if not self._speaks_batches(frame):
            return
        skip = self.accept_batch(frame)
        if skip < 0 or skip == len(frame.messages):
            return
        if not self._transaction.holding:
            self.send_batch(frame, skip)
            return
        first = frame.first_command_id
        for offset in range(skip, len(frame.messages)):
            send = f.Send(first + offset, *frame.messages[offset])
            if self.guard is not None and not self.guard.may_send(send.address):
                self.refuse_send(send.command_id, send.address)
            else:
                self.transaction.send(send)

    def refuse_send(self, command_id: int, address: str) -> None:
        """
        Answer a Send the user may not make C{not-allowed}; in a
        transaction, the transaction can then only roll back (as after
        any other refused Send of it).
        """
        detail = self.guard.refusal(f"send to {address!r}")
        if self._transaction.holding:
            self._transaction.refused = detail
        self.answer(command_id, f.Error(command_id, f.NOT_ALLOWED, detail))

    def take_ack(self, frame: f.Ack) -> None:
        if self.accept_command(frame):
            if self._transaction.holding:
                self.transaction.ack(frame)
            else:
                self.ack(frame)

    def take_ack_through(self, frame: f.AckThrough) -> None:
        if self._speaks_batches(frame) and self.accept_command(frame):
            ack = f.Ack(frame.command_id, self.unacknowledged_through(
                frame.subscription, frame.delivery_id))
            if self._transaction.holding:
                self.transaction.ack(ack)
            else:
                self.ack(ack)

    def take_credit(self, frame: f.Credit) -> None:
        if self.accept_command(frame):
            self.credit(frame)

    def _speaks_batches(self, frame) -> bool:
        connection = self.connection
        if connection.version >= f.BATCH_VERSION:
            return True
        connection.machine.protocol_error(
            f.BAD_COMMAND, f"{type(frame).__name__} needs protocol version "
            f"{f.BATCH_VERSION}; this connection speaks {connection.version}")
        return False

    def unacknowledged_through(self, number: int, delivery_id: int) -> list[int]:
        """
        The session delivery ids of subscription C{number} not yet
        acknowledged, up to C{delivery_id} (what an AckThrough names).
        """
        ids = []
        for owned, owner in self.owners.items():
            # In delivery id order: deliveries are added as they are made.
            if owned > delivery_id:
                break
            if owner[0] == number:
                ids.append(owned)
        return ids

    def send(self, frame: f.Send) -> None:
        command_id = frame.command_id
        if frame.ttl_ms:
            d = maybeDeferred(self.engine.submit, frame.address, frame.body, frame.headers,
                              frame.persistent, frame.duplicate_id,
                              expires_at(self.clock, frame.ttl_ms), frame.notify_expiry,
                              self.notice_id)
        elif frame.duplicate_id:
            d = maybeDeferred(self.engine.submit, frame.address, frame.body, frame.headers,
                              frame.persistent, duplicate_id=frame.duplicate_id)
        else:
            d = maybeDeferred(self.engine.submit, frame.address, frame.body, frame.headers,
                              frame.persistent)
        self.sends_in_progress += 1
        if self.sends_in_progress >= MAX_SENDS_IN_PROGRESS and not self.paused:
            self.paused = True
            self.connection.pause()
        d.addCallbacks(self._sent, self._send_failed, (command_id,), None, (command_id,))

    def accept_batch(self, frame: f.SendBatch) -> int:
        """
        How many of C{frame}'s leading commands the session already
        received (a client replaying after a resume: their held answers
        are re-sent, they are not carried out again), or -1 when the batch
        does not follow the last command (a connection-level
        C{bad-command}, as for any command out of sequence).
        """
        first, last = frame.first_command_id, frame.command_id
        received = self.last_command_id
        if 1 <= first <= received + 1:
            if last > received:
                self.last_command_id = last
            skip = min(last, received) - first + 1
            if skip:
                self._resend_answers(first, first + skip - 1)
            return skip
        self.connection.machine.protocol_error(
            f.BAD_COMMAND,
            f"SendBatch has command ids {first} to {last}, expected {received + 1} next",
        )
        return -1

    def _resend_answers(self, first: int, last: int) -> None:
        answers, written = self.answers, None
        for command_id in range(first, last + 1):
            held = answers.get(command_id)
            if held is not None and held is not written:
                self.write(held)
                written = held

    def send_batch(self, frame: f.SendBatch, skip: int) -> None:
        """
        Carry out the commands of C{frame} after its first C{skip} (a
        replay's), with ONE call of the engine (one store call), and
        answer them together when it fires.
        """
        messages = expiring_sends(frame.messages[skip:] if skip else frame.messages,
                                  self.clock, self.notice_id)
        first = frame.first_command_id + skip
        n = len(messages)
        if self.guard is not None:
            d = self._submit_allowed(messages)
        else:
            d = self.engine.submit_many(messages)
        self.sends_in_progress += n
        if self.sends_in_progress >= MAX_SENDS_IN_PROGRESS and not self.paused:
            self.paused = True
            self.connection.pause()
        d.addCallbacks(self._sent_batch, self._send_batch_failed, (first,), None, (first, n))

    def _submit_allowed(self, messages: list):
        """
        C{engine.submit_many} of the messages the user may send; those it
        may not get a C{not-allowed} outcome in their place, so that the
        batch is answered in order as any batch with refusals is.
        """
        may_send = self.guard.may_send
        allowed = [may_send(message[0]) for message in messages]
        if all(allowed):
            return self.engine.submit_many(messages)

        def merge(outcomes: list) -> list:
            taken = iter(outcomes)
            return [next(taken) if ok else Failure(NotAllowed(
                self.guard.refusal(f"send to {message[0]!r}")))
                for ok, message in zip(allowed, messages)]

        permitted = [message for ok, message in zip(allowed, messages) if ok]
        d = self.engine.submit_many(permitted) if permitted else succeed([])
        return d.addCallback(merge)

    def _sent_batch(self, outcomes: list, first: int) -> None:
        """
        Answer a batch: one Confirmed per run of accepted sends, an Error
        for each refused one.
        """
        run_start, msg_ids = first, []
        for offset, outcome in enumerate(outcomes):
            if type(outcome) is str:
                msg_ids.append(outcome)
                continue
            if msg_ids:
                self._confirm_run(run_start, msg_ids)
                msg_ids = []
            command_id = first + offset
            self.refuse(command_id, outcome, "send")
            run_start = command_id + 1
        if msg_ids:
            self._confirm_run(run_start, msg_ids)
        self._sends_done(len(outcomes))

    def _confirm_run(self, first: int, msg_ids: list) -> None:
        last = first + len(msg_ids) - 1
        frame = f.Confirmed(first, msg_ids)
        if self.resumable:
            answers = self.answers
            for command_id in range(first, last + 1):
                answers[command_id] = frame
            if len(answers) > MAX_HELD_ANSWERS:
                self._not_resumable(f"more than {MAX_HELD_ANSWERS} answers were not reported "
                                    "received")
        self.write(frame)
        self.done_through(first, last)

    def _send_batch_failed(self, failure, first: int, n: int) -> None:
        # submit_many reports each send's failure as its outcome; this is
        # a bug of its own.
        for command_id in range(first, first + n):
            self.refuse(command_id, failure, "send")
        self._sends_done(n)

    def _sent(self, msg_id: str, command_id: int) -> None:
        self.answer(command_id, f.Confirm(command_id, msg_id))
        self._send_done()

    def _send_failed(self, failure, command_id: int) -> None:
        self.refuse(command_id, failure, "send")
        self._send_done()

    def _send_done(self) -> None:
        self._sends_done(1)

    def _sends_done(self, n: int) -> None:
        self.sends_in_progress -= n
        if self.paused and self.sends_in_progress <= RESUME_SENDS_AT:
            self.paused = False
            if self.connection is not None:
                self.connection.resume()
        self._check_drained()

    def refuse(self, command_id: int, failure, doing: str) -> None:
        """
        Answer a command that failed with C{failure}: with the error's own
        code when it has one, else C{internal-error} (and log it).  Not
        when the router's store closed under it: the router stops, and
        has closed its client connections first (an HA instance's with
        C{not-active}), so the client fails the call as unblocked and
        retries it elsewhere.
        """
        error = failure.value
        code = getattr(error, "code", None)
        if failure.check(ExecutorStopped):
            log.info("client session {session}: {doing} not finished: the router stopped",
                     session=self.session_id, doing=doing)
        elif isinstance(error, MeshrouteError) and type(code) is str:
            self.answer(command_id, f.Error(command_id, code, str(error)))
        else:
            log.failure("client session {session}: {doing} failed", failure,
                        session=self.session_id, doing=doing)
            self.answer(command_id,
                        f.Error(command_id, f.INTERNAL_ERROR, f"{doing} failed in the router"))

    def subscribe(self, frame: f.Subscribe) -> None:
        command_id, queue, number = frame.command_id, frame.queue, frame.subscription
        if not (QUEUE_NAME.match(queue) or queue in (DEAD_LETTER_QUEUE, EXPIRED_QUEUE)):
            self.answer(command_id, f.Error(command_id, f.BAD_ADDRESS,
                                            f"invalid queue name {queue!r}"))
            return
        if frame.credit < 0:
            self.answer(command_id, f.Error(command_id, f.INVALID_ARGUMENT,
                                            "credit must not be negative"))
            return
        if number in self.subscriptions:
            self.answer(command_id, f.Error(command_id, f.INVALID_ARGUMENT,
                                            f"subscription {number} is already in use"))
            return
        if self.guard is not None and not self.guard.may_consume(queue):
            self.answer(command_id, f.Error(command_id, f.NOT_ALLOWED,
                                            self.guard.refusal(f"consume from {queue!r}")))
            return
        limits = self.settings.limits
        refusal = (limits.subscription_refusal(len(self.subscriptions))
                   or limits.credit_refusal(len(self.owners), self.outstanding_credit(),
                                            frame.credit))
        if refusal is not None:
            self.answer(command_id, f.Error(command_id, f.LIMIT_REACHED, refusal))
            return
        # Confirm first: deliveries may start inside queues.subscribe.
        self.answer(command_id, f.Confirm(command_id, ""))
        self.subscriptions[number] = self.engine.queues.subscribe(
            queue, partial(self._take, number), frame.credit)

    def _take(self, number: int, delivery) -> None:
        """
        The queue manager gives subscription C{number} a delivery: write
        it, or hold it while disconnected.
        """
        self.next_delivery_id += 1
        delivery_id = self.next_delivery_id
        self.owners[delivery_id] = (number, delivery.delivery_id, delivery.entry_id is not None)
        m = delivery.message
        # A DeliverBatch's item; a Deliver frame is made only where one
        # is written, held or kept for a resume.
        item = [delivery_id, m.msg_id, m.origin, m.headers, m.body, delivery.redelivered]
        connection = self.connection
        if connection is None or self.pending or connection.unread:
            self._hold(f.Deliver(delivery_id, number, *item[1:]), delivery.entry_id is not None)
            return
        if self.batching:
            # Into the recovery buffer with its batch (_write_batches).
            self._batch(number, item)
            return
        frame = f.Deliver(delivery_id, number, *item[1:])
        self.write(frame)
        if self.resumable:
            self.recovery.append(frame)

    def _batch(self, number: int, item: list) -> None:
        """
        Version 4: gather the deliveries of this turn (C{item}s of a
        L{f.DeliverBatch}), a run of one subscription's at a time
        (delivery ids stay in order on the wire), into DeliverBatch frames
        written at the end of the turn, or before any other frame, or at a
        bound.
        """
        headers = item[3]
        size = len(item[4])
        if headers:
            size += sum(len(k) + len(v) for k, v in headers.items())
        if size > DELIVER_BATCH_MAX_BYTES:
            # Alone, after the batches before it (write), and kept for a
            # resume as a batch's deliveries are.
            frame = f.Deliver(item[0], number, *item[1:])
            self.write(frame)
            if self.resumable:
                self.recovery.append(frame)
            return
        batches = self._batches
        if batches and (number not in batches
                        or self._batch_count >= DELIVER_BATCH_MAX_MESSAGES
                        or self._batch_bytes + size > DELIVER_BATCH_MAX_BYTES):
            self._write_batches()
            batches = self._batches
        run = batches.get(number)
        if run is None:
            run = batches[number] = []
        run.append(item)
        self._batch_count += 1
        self._batch_bytes += size
        if self._batch_call is None:
            self._batch_call = self.clock.callLater(0, self._turn_ended)

    def _turn_ended(self) -> None:
        self._batch_call = None
        if self._batches:
            self._write_batches()

    def _write_batches(self) -> None:
        batches, self._batches = self._batches, {}
        self._batch_count = self._batch_bytes = 0
        connection = self.connection
        if connection is not None:
            for number, deliveries in batches.items():
                connection.write(f.DeliverBatch(number, deliveries))
        self._keep_for_resume(batches)

    def _keep_for_resume(self, batches: dict) -> None:
        """
        The deliveries of C{batches}, written (or lost with the
        connection), join the recovery buffer as the Deliver frames a
        resume re-sends: only the last ones, which the buffer keeps, are
        made.
        """
        keep = self.recovery.maxlen  # recovery-buffer-size
        if not self.resumable or not keep:
            return
        tail = [(number, item) for number, items in batches.items() for item in items[-keep:]]
        self.recovery.extend(f.Deliver(item[0], number, *item[1:])
                             for number, item in tail[-keep:])

    def _drop_batches(self) -> None:
        """
        The connection is gone: this turn's deliveries not yet written
        are as lost in transit (kept in the recovery buffer and owners,
        so a resume deals with them as with any delivery the client did
        not receive).
        """
        self._keep_for_resume(self._batches)
        self._batches = {}
        self._batch_count = self._batch_bytes = 0
        if self._batch_call is not None and self._batch_call.active():
            self._batch_call.cancel()
        self._batch_call = None

    def _hold(self, frame: f.Deliver, persistent: bool) -> None:
        """
        Queue a delivery the client cannot take now, within the bound in
        force (L{SessionDepth.limit}).
        """
        pending = self.pending
        if len(pending) >= self.depth.limit and not persistent:
            victim = None
            if self.settings.max_depth_policy == DROP_OLDEST:
                for index, queued in enumerate(pending):
                    if not self.owners[queued.delivery_id][2]:
                        victim = queued
                        del pending[index]
                        break
            if victim is None:
                # drop-newest, or every message queued is persistent (never
                # dropped): the new one goes.
                self._drop(frame)
                return
            self._drop(victim)
        pending.append(frame)
        self._update_holding()

    def flush_pending(self) -> None:
        """
        Write what the session's own queue holds while the transport takes
        it (until it is full again); the bound reverts to C{queue-depth}
        once the queue has drained far enough (L{SessionDepth.drained_to}).
        """
        pending = self.pending
        while pending:
            connection = self.connection
            if connection is None or connection.unread:
                break
            frame = pending.popleft()
            self.write(frame)
            if self.resumable:
                self.recovery.append(frame)
        if self.connection is not None:
            self.depth.drained_to(len(pending))
        self._update_holding()

    def expired_notice(self, frame: f.Expired) -> None:
        """
        A message this session sent expired: tell the client (version 6),
        or hold the notice while disconnected.
        """
        connection = self.connection
        if connection is None:
            notices = self.notices
            if len(notices) >= self.settings.max_depth:
                notices.popleft()
            notices.append(frame)
        elif connection.version >= f.EXPIRY_VERSION:
            self.write(frame)

    def _expire_held(self, held: list) -> list:
        """
        The C{Deliver} frames of C{held} that may still be delivered; the
        others expired while the session held them: their messages go to
        C{$expired} and the session forgets them.
        """
        now = now_ms(self.clock)
        expired: dict[int, list[int]] = {}
        kept = []
        for frame in held:
            headers = frame.headers
            if headers and 0 < expires_ms(headers) <= now:
                number, queue_delivery_id, _ = self.owners.pop(frame.delivery_id)
                expired.setdefault(number, []).append(queue_delivery_id)
            else:
                kept.append(frame)
        for number, queue_delivery_ids in expired.items():
            self.subscriptions[number].expire(queue_delivery_ids)
        return kept

    def _drop(self, frame: f.Deliver) -> None:
        number, queue_delivery_id, _ = self.owners.pop(frame.delivery_id)
        self.subscriptions[number].drop(queue_delivery_id, session_id=self.session_id,
                                        client_id=self.client_id)

    def _update_holding(self) -> None:
        """
        Hold persistent messages back (in their queues) exactly while the
        session's own queue is full (an empty one, only while disconnected:
        a bound of 0 holds nothing back from a client that reads).
        """
        pending = self.pending
        holding = len(pending) >= self.depth.limit and (self.connection is None or bool(pending))
        if holding != self.holding:
            self.holding = holding
            for subscription in list(self.subscriptions.values()):
                subscription.hold_persistent(holding)

    def unsubscribe(self, frame: f.Unsubscribe) -> None:
        command_id = frame.command_id
        subscription = self.subscriptions.pop(frame.subscription, None)
        if subscription is None:
            self.answer(command_id, f.Error(command_id, f.INVALID_ARGUMENT,
                                            f"no subscription {frame.subscription}"))
            return
        self._cancel(frame.subscription, subscription)
        self.answer(command_id, f.Confirm(command_id, ""))

    def _cancel(self, number: int, subscription) -> None:
        subscription.cancel()
        owners = self.owners
        for delivery_id in [d for d, owner in owners.items() if owner[0] == number]:
            del owners[delivery_id]
        if self.pending:
            # Held for a client that did not read: gone back to the queue.
            self.pending = deque(d for d in self.pending if d.subscription != number)
            self._update_holding()

    def credit(self, frame: f.Credit) -> None:
        command_id = frame.command_id
        if frame.n < 1:
            self.answer(command_id, f.Error(command_id, f.INVALID_ARGUMENT,
                                            "credit must be at least 1"))
            return
        subscription = self.subscriptions.get(frame.subscription)
        # Credit racing an Unsubscribe is harmless: ignored.
        if subscription is not None:
            refusal = self.settings.limits.credit_refusal(
                len(self.owners), self.outstanding_credit(), frame.n)
            if refusal is not None:
                self.answer(command_id, f.Error(command_id, f.LIMIT_REACHED, refusal))
                return
            subscription.add_credit(frame.n)
        self.done(command_id)

    def outstanding_credit(self) -> int:
        """
        The deliveries the session's subscriptions may still be given.
        """
        return sum(subscription.credit for subscription in self.subscriptions.values())

    def owned(self, delivery_ids) -> dict[int, list[int]]:
        """
        Take the unacknowledged deliveries among C{delivery_ids} (the
        others are ignored): C{{subscription: [queue delivery ids]}}.
        """
        by_subscription: dict[int, list[int]] = {}
        owners = self.owners
        for delivery_id in delivery_ids:
            owner = owners.pop(delivery_id, None)
            if owner is not None:
                by_subscription.setdefault(owner[0], []).append(owner[1])
        return by_subscription

    def ack(self, frame: f.Ack) -> None:
        by_subscription = self.owned(frame.delivery_ids)
        if not by_subscription:
            self.done(frame.command_id)
            return
        self.acks_in_progress += 1
        acking = []
        for number, delivery_ids in by_subscription.items():
            d = self.subscriptions[number].ack(delivery_ids)
            d.addErrback(lambda failure: log.failure(
                "client session {session}: acknowledging failed", failure,
                session=self.session_id))
            acking.append(d)
        DeferredList(acking).addCallback(self._ack_done, frame.command_id)

    def _ack_done(self, _, command_id: int) -> None:
        self.acks_in_progress -= 1
        self.done(command_id)
        self._check_drained()

    def give_back(self, delivery_ids) -> None:
        """
        The client returns these deliveries unprocessed (STOMP's C{NACK};
        the native protocol has no such command): back to the front of
        their queues, flagged redelivered, with the credit they spent.
        Not a command, and outside any transaction.  Unknown ids are
        ignored.
        """
        for number, queue_delivery_ids in self.owned(delivery_ids).items():
            self.subscriptions[number].give_back(queue_delivery_ids)

    def take_ack_at_once(self, frame: f.Ack) -> None:
        """
        An Ack the client's protocol makes on delivery (STOMP's C{ack:auto}
        subscriptions): carried out at once, outside any transaction
        the session holds, since the client never decided it.
        """
        if self.accept_command(frame):
            self.ack(frame)

    def transact(self, frame, what: str) -> None:
        """
        Feed a Begin, Commit or Rollback (C{what}: the transaction
        machine's input) to the transaction.  On a version-1 connection,
        or where the transaction's state has no place for it, it is a
        connection-level C{bad-command}.
        """
        connection = self.connection
        if connection.version < f.TRANSACTIONS_VERSION:
            connection.machine.protocol_error(
                f.BAD_COMMAND, f"{type(frame).__name__} needs protocol version "
                f"{f.TRANSACTIONS_VERSION}; this connection speaks {connection.version}")
            return
        if not self.accept_command(frame):
            return
        try:
            getattr(self.transaction, what)(frame)
        except NoTransition:
            where = "inside" if isinstance(frame, f.Begin) else "outside"
            connection.machine.protocol_error(
                f.BAD_COMMAND, f"{type(frame).__name__} {where} a transaction")

    def commit_done(self) -> None:
        self.commits_in_progress -= 1
        self._check_drained()

    def received(self, frame: f.Received) -> None:
        """
        The client holds these answers and deliveries: forget them.
        """
        self._forget_answers(frame.answered_up_to)
        recovery = self.recovery
        while recovery and recovery[0].delivery_id <= frame.delivered_up_to:
            recovery.popleft()

    def _forget_answers(self, answered_up_to: int) -> None:
        answers = self.answers
        if answers and answered_up_to > 0:
            for command_id in [c for c in answers if c <= answered_up_to]:
                del answers[command_id]

    # -- losing and resuming the connection ---------------------------------------

    def disconnect(self, inputs: ServedSessionInputs, reason: str) -> None:
        """
        The connection is gone without Close: keep the session for
        keep-alive (or end it now if it cannot be resumed).
        """
        self.connection = None
        self._drop_batches()
        self.paused = False
        self.state = DISCONNECTED
        self.disconnected_at = self.clock.seconds()
        if self._processed_call is not None:
            self._processed_call.cancel()
            self._processed_call = None
        keep_alive_ms = self.settings.keep_alive_ms
        self.events.emit(event_names.SESSION_DISCONNECTED, session_id=self.session_id,
                         client_id=self.client_id, reason=reason, keep_alive_ms=keep_alive_ms,
                         last_command_id=self.last_command_id,
                         unacknowledged=len(self.owners))
        log.info("client session {session} ({client}) disconnected ({reason}); kept for "
                 "{keep_alive} ms", session=self.session_id, client=self.client_id or "-",
                 reason=reason, keep_alive=keep_alive_ms)
        if not self.resumable:
            inputs.keep_alive_expired()
            return
        self.depth.disconnected()
        self._update_holding()
        self._keep_alive_call = self.clock.callLater(keep_alive_ms / 1000,
                                                     inputs.keep_alive_expired)

    def resume(self, connection, frame: f.Open) -> None:
        """
        Reattach to C{connection}: Opened, the held answers and deliveries
        the client lacks, then carry on.
        """
        if self._keep_alive_call is not None and self._keep_alive_call.active():
            self._keep_alive_call.cancel()
        self._keep_alive_call = None
        disconnected_for = self.clock.seconds() - self.disconnected_at
        self.connection = connection
        self.batching = connection.version >= f.BATCH_VERSION
        self.state = OPEN
        self.disconnected_at = None
        self.client_id = frame.client_id
        self.ttl_ms = connection.ttl_ms
        self.write(connection.opened(self.session_id, self.engine.name, self.ttl_ms, True,
                                     self.last_command_id))
        # 1. The answers the client does not hold.
        self._forget_answers(frame.answered_up_to)
        answers, written = self.answers, None
        for command_id in sorted(answers):
            # A Confirmed answers several commands: written once.
            if answers[command_id] is not written:
                written = answers[command_id]
                self.write(written)
        # 2. The deliveries it did not receive: from the recovery buffer,
        # then what queued while disconnected.
        delivered_up_to, owners = frame.delivered_up_to, self.owners
        again = self._expire_held([d for d in self.recovery if d.delivery_id > delivered_up_to
                                   and d.delivery_id in owners])
        self.recovery.clear()
        self.pending = deque(self._expire_held(list(self.pending)))
        queued = len(self.pending)
        # Those sent before that the client did not receive and that cannot
        # be sent again go back to their queues.
        resent = {d.delivery_id for d in again}
        resent.update(d.delivery_id for d in self.pending)
        lost: dict[int, list[int]] = {}
        for delivery_id in [d for d in owners if d > delivered_up_to and d not in resent]:
            number, queue_delivery_id, _ = owners.pop(delivery_id)
            lost.setdefault(number, []).append(queue_delivery_id)
        for delivery in again:
            self.write(delivery)
            if self.resumable:
                self.recovery.append(delivery)
        notices, self.notices = self.notices, deque()
        if connection.version >= f.EXPIRY_VERSION:
            for notice in notices:
                self.write(notice)
        # 3. What queued while disconnected, as the transport takes it;
        # then carry on.
        self.flush_pending()
        for number, queue_delivery_ids in lost.items():
            self.subscriptions[number].give_back(queue_delivery_ids)
        if self.sends_in_progress >= MAX_SENDS_IN_PROGRESS:
            self.paused = True
            connection.pause()
        self._processed_sent = 0
        self._schedule_processed()
        requeued = sum(len(ids) for ids in lost.values())
        self.events.emit(event_names.SESSION_REATTACHED, session_id=self.session_id,
                         client_id=self.client_id, last_command_id=self.last_command_id,
                         answers_resent=len(answers), deliveries_resent=len(again) + queued,
                         requeued=requeued, disconnected_for_s=disconnected_for)
        log.info("client session {session} ({client}) reattached after {seconds:.3f} s",
                 session=self.session_id, client=self.client_id or "-",
                 seconds=disconnected_for)

    def expire(self) -> None:
        """
        Keep-alive passed: the session ends, its unacknowledged deliveries
        (held ones included) go back to their queues.
        """
        self._keep_alive_call = None
        requeued = len(self.owners)
        self._end(EXPIRED)
        self.events.emit(event_names.SESSION_EXPIRED, session_id=self.session_id,
                         client_id=self.client_id, requeued=requeued,
                         keep_alive_ms=self.settings.keep_alive_ms,
                         resumable=self.resumable)
        log.info("client session {session} ({client}) expired", session=self.session_id,
                 client=self.client_id or "-")

    # -- closing ----------------------------------------------------------------

    def begin_close(self) -> None:
        """
        Close received: stop consuming now, and answer once every command
        in progress is done.
        """
        self.state = CLOSING
        self.transaction.end()
        self._cancel_all()
        self._check_drained()

    def _check_drained(self) -> None:
        if (self.state == CLOSING and self.connection is not None and self.machine is not None
                and not self.sends_in_progress and not self.acks_in_progress
                and not self.commits_in_progress):
            self.machine.drained()

    def closed(self) -> None:
        """
        Every command before Close is done: Closed, and the connection
        closes.
        """
        connection = self.connection
        self.write(f.Closed())
        self._end(CLOSED)
        self.events.emit(event_names.SESSION_CLOSED, session_id=self.session_id,
                         client_id=self.client_id, reason="client")
        connection.machine.session_ended()
        log.info("client session {session} closed by the client", session=self.session_id)

    def abandon(self, reason: str) -> None:
        """
        The session ends without Closed: its connection was lost while
        closing, or failed (C{reason} is then the error code).
        """
        self._end(CLOSED)
        self.events.emit(event_names.SESSION_CLOSED, session_id=self.session_id,
                         client_id=self.client_id, reason=reason)

    def _end(self, state: str) -> None:
        self.state = state
        self.connection = None
        self._drop_batches()
        self.paused = False
        self.transaction.end()
        self._cancel_all()
        self.registry.remove(self)
        self.answers.clear()
        self.recovery.clear()
        self.pending.clear()
        for call in (self._processed_call, self._keep_alive_call):
            if call is not None and call.active():
                call.cancel()
        self._processed_call = self._keep_alive_call = None

    def _cancel_all(self) -> None:
        subscriptions, self.subscriptions = self.subscriptions, {}
        for subscription in subscriptions.values():
            subscription.cancel()
        self.owners.clear()
        self.pending.clear()
        self.holding = False

    def describe(self) -> dict:
        """
        The session as the admin API shows it.
        """
        now = self.clock.seconds()
        disconnected_for = (now - self.disconnected_at
                            if self.disconnected_at is not None else None)
        expires_in = (max(0.0, self.settings.keep_alive_ms / 1000 - disconnected_for)
                      if disconnected_for is not None else None)
        return {
            "session_id": self.session_id,
            "client_id": self.client_id,
            "user": self.user,
            "protocol": self.protocol,
            "state": self.state,
            "ttl_ms": self.ttl_ms,
            "queued": len(self.pending),
            "recovery": len(self.recovery),
            "answers_held": len(self.answers),
            "subscriptions": len(self.subscriptions),
            "unacknowledged": len(self.owners),
            "last_command_id": self.last_command_id,
            "processed_up_to": self.processed_up_to,
            "resumable": self.resumable,
            "disconnected_for_s": disconnected_for,
            "expires_in_s": expires_in,
        }


def _build_session_machine():
    builder = TypeMachineBuilder(ServedSessionInputs, ServedSession)
    open_ = builder.state("open")
    disconnected = builder.state("disconnected")
    draining = builder.state("draining")
    closed = builder.state("closed")
    expired = builder.state("expired")

    @open_.upon(ServedSessionInputs.got_send).loop()
    def send(inputs: ServedSessionInputs, core: ServedSession, frame: f.Send) -> None:
        core.take_send(frame)

    @open_.upon(ServedSessionInputs.got_send_batch).loop()
    def send_batch(inputs: ServedSessionInputs, core: ServedSession, frame: f.SendBatch) -> None:
        core.take_send_batch(frame)

    @open_.upon(ServedSessionInputs.got_ack_through).loop()
    def ack_through(inputs: ServedSessionInputs, core: ServedSession, frame: f.AckThrough) -> None:
        core.take_ack_through(frame)

    @open_.upon(ServedSessionInputs.got_subscribe).loop()
    def subscribe(inputs: ServedSessionInputs, core: ServedSession, frame: f.Subscribe) -> None:
        if core.accept_command(frame):
            core.subscribe(frame)

    @open_.upon(ServedSessionInputs.got_unsubscribe).loop()
    def unsubscribe(inputs: ServedSessionInputs, core: ServedSession, frame: f.Unsubscribe) -> None:
        if core.accept_command(frame):
            core.unsubscribe(frame)

    @open_.upon(ServedSessionInputs.got_credit).loop()
    def credit(inputs: ServedSessionInputs, core: ServedSession, frame: f.Credit) -> None:
        core.take_credit(frame)

    @open_.upon(ServedSessionInputs.got_ack).loop()
    def ack(inputs: ServedSessionInputs, core: ServedSession, frame: f.Ack) -> None:
        core.take_ack(frame)

    @open_.upon(ServedSessionInputs.got_begin).loop()
    def begin(inputs: ServedSessionInputs, core: ServedSession, frame: f.Begin) -> None:
        core.transact(frame, "begin")

    @open_.upon(ServedSessionInputs.got_commit).loop()
    def commit(inputs: ServedSessionInputs, core: ServedSession, frame: f.Commit) -> None:
        core.transact(frame, "commit")

    @open_.upon(ServedSessionInputs.got_rollback).loop()
    def rollback(inputs: ServedSessionInputs, core: ServedSession, frame: f.Rollback) -> None:
        core.transact(frame, "rollback")

    @open_.upon(ServedSessionInputs.got_close).to(draining)
    def close(inputs: ServedSessionInputs, core: ServedSession, frame: f.Close) -> None:
        # A Close out of sequence fails the connection, which ends the
        # session (failed, below).
        if core.accept_command(frame, replayable=False):
            core.begin_close()

    for state in (open_, draining):

        @state.upon(ServedSessionInputs.got_received).loop()
        def received(inputs: ServedSessionInputs, core: ServedSession, frame: f.Received) -> None:
            core.received(frame)

        @state.upon(ServedSessionInputs.failed).to(closed)
        def failed(inputs: ServedSessionInputs, core: ServedSession, code: str) -> None:
            core.abandon(code)

    @open_.upon(ServedSessionInputs.connection_lost).to(disconnected)
    def lost(inputs: ServedSessionInputs, core: ServedSession, reason: str) -> None:
        core.disconnect(inputs, reason)

    @disconnected.upon(ServedSessionInputs.resumed).to(open_)
    def resume(inputs: ServedSessionInputs, core: ServedSession, connection, frame: f.Open) -> bool:
        core.resume(connection, frame)
        return True

    # A session that had stopped being resumable expires as soon as its
    # connection is taken from it: the connection that asked for it gets
    # a new one (Opened(reattached=false)).
    expired.upon(ServedSessionInputs.resumed).loop().returns(False)

    @disconnected.upon(ServedSessionInputs.keep_alive_expired).to(expired)
    def expire(inputs: ServedSessionInputs, core: ServedSession) -> None:
        core.expire()

    @draining.upon(ServedSessionInputs.drained).to(closed)
    def drained(inputs: ServedSessionInputs, core: ServedSession) -> None:
        core.closed()

    @draining.upon(ServedSessionInputs.connection_lost).to(closed)
    def lost_while_closing(inputs: ServedSessionInputs, core: ServedSession, reason: str) -> None:
        core.abandon(reason)

    # Commands still in progress when a session ends finish with nobody to
    # tell; a drained check racing the end is moot.
    for state in (closed, expired):
        state.upon(ServedSessionInputs.drained).loop().returns(None)
    return builder.build()


#: Machine factory: C{SERVED_SESSION_MACHINE(core)} returns the inputs object.
SERVED_SESSION_MACHINE = _build_session_machine()


#: The frames that, while the session is C{open} (its machine's state, as
#: C{ServedSession.state} mirrors it), the connection's protocol hands
#: straight to the core's method, without Automat's transition (the data
#: path: one per message or per batch).  Any other state goes through the
#: machines, which refuse what has no transition.
HOT_FRAMES = {
    f.Send: ServedSession.take_send,
    f.SendBatch: ServedSession.take_send_batch,
    f.Ack: ServedSession.take_ack,
    f.AckThrough: ServedSession.take_ack_through,
    f.Credit: ServedSession.take_credit,
}
