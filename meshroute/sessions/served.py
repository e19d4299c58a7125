"""
The served session: the router's side of one client session, as an
Automat machine.  A session outlives its connections
(docs/client-protocol.md, "Sessions that survive failures").  (The
application's side of a session is the client library's,
L{meshroute.client.core}.)

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
(L{meshroute.sessions.native_connection}) turns each command and
C{Received} frame into an input of the session's machine, and a frame the
session's state has no transition for (C{NoTransition}) into C{Error(0,
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

The machine holds no data: L{ServedSession} keeps the session's state,
takes each command in sequence, and hands the work to the collaborators
that hold what the session holds, each within its bounds:

 - L{meshroute.sessions.answers}: the commands' sequence, C{Processed},
   and the answers held for a resume (up to C{MAX_HELD_ANSWERS}).
 - L{meshroute.sessions.sends}: the Sends relayed to the engine (reading
   paused at C{MAX_SENDS_IN_PROGRESS}).
 - L{meshroute.sessions.deliveries}: the subscriptions, the deliveries
   not yet acknowledged, the recovery buffer a resume re-sends from, and
   a version-4 connection's C{DeliverBatch} frames.
 - L{meshroute.sessions.topic_subscribing}: the topic subscriptions the
   router is making (version 8), and the Unsubscribes that forget
   durable ones.
 - L{meshroute.sessions.own_queue}: what waits for a client that is away
   or does not read (C{queue-depth}, C{max-depth}, C{max-depth-policy}).
 - L{meshroute.sessions.reattachment}: a disconnected session's wait for
   its client (C{keep-alive}), and what a resume re-sends.
 - L{meshroute.sessions.transaction}: the transaction (protocol version
   2), a machine of its own, which holds Sends and Acks until the commit.
 - L{meshroute.sessions.two_phase}: the transactions it prepared
   (version 7), and its commands naming a transaction by its xid.

What it records of its life (opened, disconnected, reattached, expired,
closed) is written through L{meshroute.sessions.session_records}.
"""

import uuid
from dataclasses import dataclass, field
from typing import Protocol

from automat import NoTransition, TypeMachineBuilder
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from meshroute.sessions import session_records
from meshroute.sessions.answer_pacing import AnswerPacing
from meshroute.sessions.answers import Answers
from meshroute.sessions.deliveries import DeliverBatches, Deliveries
from meshroute.sessions.own_queue import OwnQueue
from meshroute.sessions.reattachment import Reattachment
from meshroute.sessions.sends import Sends
from meshroute.sessions.settings import SessionSettings
from meshroute.sessions.topic_subscribing import TopicSubscribing
from meshroute.sessions.transaction import (
    TRANSACTION_MACHINE,
    TransactionCore,
    TransactionInputs,
)
from meshroute.sessions.two_phase import TwoPhase
from meshroute.wire import client_frames as f

log = Logger()

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
MQTT = "mqtt"


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

    def got_subscribe_topic(self, frame: f.SubscribeTopic) -> None:
        "The client wants the publications matching a topic pattern (version 8)."

    def got_unsubscribe(self, frame: f.Unsubscribe) -> None:
        "The client stops a subscription (and may forget a durable one, version 8)."

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

    def got_prepare(self, frame: f.Prepare) -> None:
        "The client prepares its transaction for two-phase commit (version 7)."

    def got_commit_xid(self, frame: f.CommitXid) -> None:
        "The client commits a transaction by its xid (version 7)."

    def got_rollback_xid(self, frame: f.RollbackXid) -> None:
        "The client rolls a prepared transaction back by its xid (version 7)."

    def got_recover(self, frame: f.Recover) -> None:
        "The client asks which transactions are prepared (version 7)."

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


def _build_served_session_machine():
    """
    The transition table of L{ServedSessionInputs} (the module docstring's
    picture), over L{ServedSession} (defined below; the machine is built
    once it is, as L{SERVED_SESSION_MACHINE}).
    """
    builder = TypeMachineBuilder(ServedSessionInputs, ServedSession)
    open_ = builder.state("open")
    disconnected = builder.state("disconnected")
    draining = builder.state("draining")
    closed = builder.state("closed")
    expired = builder.state("expired")

    # -- open: the commands ---------------------------------------------------

    @open_.upon(ServedSessionInputs.got_send).loop()
    def send(inputs: ServedSessionInputs, core: ServedSession, frame: f.Send) -> None:
        core.take_send(frame)

    @open_.upon(ServedSessionInputs.got_send_batch).loop()
    def send_batch(inputs: ServedSessionInputs, core: ServedSession, frame: f.SendBatch) -> None:
        core.take_send_batch(frame)

    @open_.upon(ServedSessionInputs.got_ack_through).loop()
    def ack_through(inputs: ServedSessionInputs, core: ServedSession,
                    frame: f.AckThrough) -> None:
        core.take_ack_through(frame)

    @open_.upon(ServedSessionInputs.got_subscribe).loop()
    def subscribe(inputs: ServedSessionInputs, core: ServedSession, frame: f.Subscribe) -> None:
        core.take_subscribe(frame)

    @open_.upon(ServedSessionInputs.got_subscribe_topic).loop()
    def subscribe_topic(inputs: ServedSessionInputs, core: ServedSession,
                        frame: f.SubscribeTopic) -> None:
        core.take_subscribe_topic(frame)

    @open_.upon(ServedSessionInputs.got_unsubscribe).loop()
    def unsubscribe(inputs: ServedSessionInputs, core: ServedSession,
                    frame: f.Unsubscribe) -> None:
        core.take_unsubscribe(frame)

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

    @open_.upon(ServedSessionInputs.got_prepare).loop()
    def prepare(inputs: ServedSessionInputs, core: ServedSession, frame: f.Prepare) -> None:
        core.transact(frame, "prepare", f.TPC_VERSION)

    @open_.upon(ServedSessionInputs.got_commit_xid).loop()
    def commit_xid(inputs: ServedSessionInputs, core: ServedSession,
                   frame: f.CommitXid) -> None:
        if frame.one_phase:
            core.transact(frame, "commit", f.TPC_VERSION)
        else:
            core.by_xid(frame, core.two_phase.commit)

    @open_.upon(ServedSessionInputs.got_rollback_xid).loop()
    def rollback_xid(inputs: ServedSessionInputs, core: ServedSession,
                     frame: f.RollbackXid) -> None:
        core.by_xid(frame, core.two_phase.rollback)

    @open_.upon(ServedSessionInputs.got_recover).loop()
    def recover(inputs: ServedSessionInputs, core: ServedSession, frame: f.Recover) -> None:
        core.by_xid(frame, core.two_phase.recover)

    # -- closing --------------------------------------------------------------

    @open_.upon(ServedSessionInputs.got_close).to(draining)
    def close(inputs: ServedSessionInputs, core: ServedSession, frame: f.Close) -> None:
        # A Close out of sequence fails the connection, which ends the
        # session (failed, below).
        if core.answers.accept(frame, replayable=False):
            core.begin_close()

    for state in (open_, draining):

        @state.upon(ServedSessionInputs.got_received).loop()
        def received(inputs: ServedSessionInputs, core: ServedSession,
                     frame: f.Received) -> None:
            core.received(frame)

        @state.upon(ServedSessionInputs.failed).to(closed)
        def failed(inputs: ServedSessionInputs, core: ServedSession, code: str) -> None:
            core.abandon(code)

    @draining.upon(ServedSessionInputs.drained).to(closed)
    def drained(inputs: ServedSessionInputs, core: ServedSession) -> None:
        core.closed()

    @draining.upon(ServedSessionInputs.connection_lost).to(closed)
    def lost_while_closing(inputs: ServedSessionInputs, core: ServedSession,
                           reason: str) -> None:
        core.abandon(reason)

    # -- losing and resuming the connection -----------------------------------

    @open_.upon(ServedSessionInputs.connection_lost).to(disconnected)
    def lost(inputs: ServedSessionInputs, core: ServedSession, reason: str) -> None:
        core.disconnect(inputs, reason)

    @disconnected.upon(ServedSessionInputs.resumed).to(open_)
    def resume(inputs: ServedSessionInputs, core: ServedSession, connection,
               frame: f.Open) -> bool:
        core.resume(connection, frame)
        return True

    # A session that had stopped being resumable expires as soon as its
    # connection is taken from it: the connection that asked for it gets
    # a new one (Opened(reattached=false)).
    expired.upon(ServedSessionInputs.resumed).loop().returns(False)

    @disconnected.upon(ServedSessionInputs.keep_alive_expired).to(expired)
    def expire(inputs: ServedSessionInputs, core: ServedSession) -> None:
        core.expire()

    # Commands still in progress when a session ends finish with nobody to
    # tell; a drained check racing the end is moot.
    for state in (closed, expired):
        state.upon(ServedSessionInputs.drained).loop().returns(None)
    return builder.build()


class _NoEvents:
    def emit(self, event: str, **fields) -> None:
        pass


NO_EVENTS = _NoEvents()


@dataclass(eq=False)
class ServedSession:
    """
    The data of one served session and the I/O its machine's behaviours
    perform: its identity, its state and connection, the commands taken
    in sequence and handed to its collaborators (the module docstring),
    and its life from start to end.

    @ivar registry: the L{meshroute.sessions.registry.SessionRegistry} it
        joins while it lives.
    @ivar connection: the L{meshroute.sessions.connection_core.ConnectionCore}
        the session is attached to, or None while disconnected (or ended).
    @ivar state: the machine's state as the admin API shows it (set by its
        behaviours only).
    @ivar notice_id: what the messages this session sends asking for an
        expiry notice name it by (their header C{x-notify-expiry}): not
        its id, which would let any consumer of them resume the session.
    @ivar user: the authenticated user that opened the session (None on
        a listener without C{[security]}): only that user resumes it.
    @ivar guard: the user's permission checks
        (L{meshroute.sessions.permissions.Guard}), or None: everything is
        allowed.
    @ivar protocol: what its client speaks: L{NATIVE}, L{STOMP} or L{MQTT}
        (a L{meshroute.stomp.connection} or L{meshroute.mqtt.connection}
        adapter feeds it native commands).
    @ivar details: what its protocol adds to its description in the admin
        API (MQTT: the protocol level, keep-alive, whether persistent).
    @ivar resumable: a new connection may resume it (a STOMP session never
        is; a native one stops being when its client does not report the
        answers it holds).
    @ivar answers: its commands' sequence and answers (L{Answers}).
    @ivar answer_pacing: when its sends' answers are written
        (L{AnswerPacing}).
    @ivar sends: its Sends on their way to the engine (L{Sends}).
    @ivar deliveries: its subscriptions and what they were given
        (L{Deliveries}).
    @ivar own_queue: what waits for its client (L{OwnQueue}).
    @ivar reattachment: its time between connections: the keep-alive,
        the expiry notices held, the resume (L{Reattachment}).
    @ivar batches: this turn's deliveries on a version-4 connection
        (L{DeliverBatches}).
    @ivar transaction: its transaction's machine (its inputs), over
        C{transaction_core} (L{TransactionCore}: whether it holds, and
        what).
    @ivar two_phase: the transactions it prepared, and its commands by
        xid (L{TwoPhase}).
    @ivar topic_subscribing: its topic subscriptions being made, and its
        Unsubscribes forgetting durable ones (L{TopicSubscribing}).
    """

    engine: object
    clock: IReactorTime
    registry: object
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
    notice_id: str = ""
    resumable: bool = True
    details: dict = field(default_factory=dict)
    answers: Answers = field(init=False, repr=False)
    answer_pacing: AnswerPacing = field(init=False, repr=False)
    sends: Sends = field(init=False, repr=False)
    deliveries: Deliveries = field(init=False, repr=False)
    own_queue: OwnQueue = field(init=False, repr=False)
    reattachment: Reattachment = field(init=False, repr=False)
    batches: DeliverBatches = field(init=False, repr=False)
    transaction_core: TransactionCore = field(init=False, repr=False)
    transaction: TransactionInputs = field(init=False, repr=False)
    two_phase: TwoPhase = field(init=False, repr=False)
    topic_subscribing: TopicSubscribing = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.answers = Answers(self)
        self.answer_pacing = AnswerPacing(self.clock, self._write_now,
                                          self.settings.send_answer_hold_ms / 1000)
        self.sends = Sends(self)
        self.deliveries = Deliveries(self)
        self.own_queue = OwnQueue(self)
        self.reattachment = Reattachment(self)
        self.batches = DeliverBatches(self)
        self.transaction_core = TransactionCore(self)
        self.transaction = TRANSACTION_MACHINE(self.transaction_core)
        self.two_phase = TwoPhase(self)
        self.topic_subscribing = TopicSubscribing(self)

    # -- output ---------------------------------------------------------------

    def write(self, frame) -> None:
        """
        Send C{frame} on the session's connection, if it has one, after
        the send answers held and the deliveries of this turn not yet
        written (so that frames keep the order in which they were made).
        """
        self.answer_pacing.release()
        batches = self.batches
        if batches.runs:
            batches.write()
        if self.connection is not None:
            self.connection.write(frame)

    def write_send_answer(self, frame) -> None:
        """
        Send a send's answer (C{Confirm} with its message id,
        C{Confirmed}) after this turn's deliveries, now or a moment later
        with others (L{AnswerPacing}).  Without a connection nothing is
        written (or held): a resume re-sends the answers the client lacks.
        """
        if self.connection is None:
            return
        batches = self.batches
        if batches.runs:
            batches.write()
        self.answer_pacing.answer(frame)

    def _write_now(self, frame) -> None:
        if self.connection is not None:
            self.connection.write(frame)

    def flush_pending(self) -> None:
        """
        The transport has room again (the client reads): write what the
        session's own queue held meanwhile (L{OwnQueue.flush}).
        """
        self.own_queue.flush()

    def not_resumable(self, why: str) -> None:
        """
        The session can no longer be resumed: what it held for a resume
        is forgotten.
        """
        log.warn("client session {session} ({client}) can no longer be resumed: {why}",
                 session=self.session_id, client=self.client_id or "-", why=why)
        self.resumable = False
        self.answers.held.clear()
        self.deliveries.recovery.clear()

    # -- opening ----------------------------------------------------------------

    def start(self, connection, frame: f.Open) -> None:
        """
        A new session on C{connection}.  C{frame.session_id}, when set,
        named a session that cannot be resumed: the client recreates its
        state.
        """
        self.session_id = uuid.uuid4().hex
        self.notice_id = uuid.uuid4().hex
        self._attach(connection, frame)
        self.registry.add(self)
        self.write(connection.opened(self.session_id, self.engine.name, self.ttl_ms, False, 0))
        session_records.opened(self, frame.session_id)

    def _attach(self, connection, frame: f.Open) -> None:
        self.connection = connection
        self.deliveries.batching = connection.version >= f.BATCH_VERSION
        self.client_id = frame.client_id
        self.ttl_ms = connection.ttl_ms
        self.state = OPEN

    # -- commands ---------------------------------------------------------------

    # Each command is taken in sequence (Answers.accept) and handed to the
    # collaborator that carries it out.  The machine's behaviours in
    # C{open} are these methods, and the connection's protocol calls the
    # data commands' directly while the session is open (L{HOT_FRAMES}):
    # the machine stays the authority for every change of stage (C{state}
    # is set by its behaviours only), and the transaction machine's for
    # Begin, Commit and Rollback (C{TransactionCore.holding}, likewise).

    def take_send(self, frame: f.Send) -> None:
        if self.answers.accept(frame):
            self.sends.take(frame)

    def take_sends(self, sends: list) -> None:
        """
        Consecutive Sends a protocol adapter read at once (its
        L{meshroute.sessions.connection_core.ConnectionCore.flush_sends}): each
        taken in sequence as C{take_send} takes it, all relayed with one
        store call.
        """
        accept = self.answers.accept
        accepted = [send for send in sends if accept(send)]
        if accepted:
            self.sends.take_many(accepted)

    def take_send_batch(self, frame: f.SendBatch) -> None:
        if not self._speaks(f.BATCH_VERSION, frame):
            return
        skip = self.answers.accept_batch(frame)
        if skip < 0 or skip == len(frame.messages):
            return
        self.sends.take_batch(frame, skip)

    def take_ack(self, frame: f.Ack) -> None:
        if self.answers.accept(frame):
            self.deliveries.take_ack(frame)

    def take_ack_through(self, frame: f.AckThrough) -> None:
        if self._speaks(f.BATCH_VERSION, frame) and self.answers.accept(frame):
            deliveries = self.deliveries
            deliveries.take_ack(f.Ack(frame.command_id, deliveries.unacknowledged_through(
                frame.subscription, frame.delivery_id)))

    def take_ack_at_once(self, frame: f.Ack) -> None:
        """
        An Ack the client's protocol makes on delivery (STOMP's C{ack:auto}
        subscriptions): carried out at once, outside any transaction
        the session holds, since the client never decided it.
        """
        if self.answers.accept(frame):
            self.deliveries.ack(frame)

    def take_credit(self, frame: f.Credit) -> None:
        if self.answers.accept(frame):
            self.deliveries.credit(frame)

    def take_subscribe(self, frame: f.Subscribe) -> None:
        if self.answers.accept(frame):
            self.deliveries.subscribe(frame)

    def take_subscribe_topic(self, frame: f.SubscribeTopic) -> None:
        # Version 8's: the native connection refuses it on an older one
        # (L{meshroute.sessions.native_connection}), since a STOMP
        # session, of version 2 to the session, subscribes to topics too.
        if self.answers.accept(frame):
            self.topic_subscribing.subscribe(frame)

    def take_unsubscribe(self, frame: f.Unsubscribe) -> None:
        if not self.answers.accept(frame):
            return
        if frame.forget or frame.subscription in self.deliveries.pending:
            self.topic_subscribing.unsubscribe(frame)
        else:
            self.deliveries.unsubscribe(frame)

    def transact(self, frame, what: str, version: int = f.TRANSACTIONS_VERSION) -> None:
        """
        Feed a Begin, Commit, Rollback, Prepare or one-phase CommitXid
        (C{what}: the transaction machine's input) to the transaction.  On
        a connection older than C{version}, or where the transaction's
        state has no place for it, it is a connection-level
        C{bad-command}.
        """
        if not (self._speaks(version, frame) and self.answers.accept(frame)):
            return
        try:
            getattr(self.transaction, what)(frame)
        except NoTransition:
            where = "inside" if isinstance(frame, f.Begin) else "outside"
            self.connection.machine.protocol_error(
                f.BAD_COMMAND, f"{type(frame).__name__} {where} a transaction")

    def by_xid(self, frame, carry_out) -> None:
        """
        A command naming a transaction by its xid, or a Recover (version
        7): C{carry_out(frame)} (a method of L{TwoPhase}) when it is the
        next command.
        """
        if self._speaks(f.TPC_VERSION, frame) and self.answers.accept(frame):
            carry_out(frame)

    def _speaks(self, version: int, frame) -> bool:
        """
        Whether the connection speaks C{version}, which C{frame} needs;
        if not, C{frame} is a connection-level C{bad-command}.
        """
        connection = self.connection
        if connection.version >= version:
            return True
        connection.machine.protocol_error(
            f.BAD_COMMAND, f"{type(frame).__name__} needs protocol version {version}; "
            f"this connection speaks {connection.version}")
        return False

    def received(self, frame: f.Received) -> None:
        """
        The client holds these answers and deliveries: forget them.
        """
        self.answers.forget(frame.answered_up_to)
        self.deliveries.received(frame.delivered_up_to)

    def expired_notice(self, frame: f.Expired) -> None:
        """
        A message this session sent expired: tell the client (version 6),
        or hold the notice while disconnected.
        """
        connection = self.connection
        if connection is None:
            self.reattachment.hold(frame)
        elif connection.version >= f.EXPIRY_VERSION:
            self.write(frame)

    # -- losing and resuming the connection ---------------------------------------

    def disconnect(self, inputs: ServedSessionInputs, reason: str) -> None:
        """
        The connection is gone without Close: keep the session for
        keep-alive (or end it now if it cannot be resumed).
        """
        self.connection = None
        self.batches.drop()
        self.answer_pacing.drop()
        self.sends.detached()
        self.state = DISCONNECTED
        self.answers.detached()
        self.reattachment.wait(reason, inputs.keep_alive_expired)

    def resume(self, connection, frame: f.Open) -> None:
        """
        Reattach to C{connection} (L{Reattachment.resume}).
        """
        self._attach(connection, frame)
        self.reattachment.resume(connection, frame)

    def expire(self) -> None:
        """
        Keep-alive passed: the session ends, its unacknowledged deliveries
        (held ones included) go back to their queues.
        """
        requeued = len(self.deliveries.owners)
        self._end(EXPIRED)
        session_records.expired(self, requeued)

    # -- closing ----------------------------------------------------------------

    def begin_close(self) -> None:
        """
        Close received: stop consuming now, and answer once every command
        in progress is done.
        """
        self.state = CLOSING
        self.transaction.end()
        self.deliveries.cancel_all()
        self.check_drained()

    def check_drained(self) -> None:
        """
        A command in progress finished: if the session is closing and it
        was the last, the session is drained.
        """
        if (self.state == CLOSING and self.connection is not None and self.machine is not None
                and not self.sends.in_progress and not self.deliveries.acks_in_progress
                and not self.transaction_core.commits_in_progress
                and not self.two_phase.in_progress and not self.topic_subscribing.in_progress):
            self.machine.drained()

    def closed(self) -> None:
        """
        Every command before Close is done: Closed, and the connection
        closes.
        """
        connection = self.connection
        self.write(f.Closed())
        self._end(CLOSED)
        session_records.closed(self, session_records.CLIENT)
        connection.machine.session_ended()

    def abandon(self, reason: str) -> None:
        """
        The session ends without Closed: its connection was lost while
        closing, or failed (C{reason} is then the error code).
        """
        self._end(CLOSED)
        session_records.closed(self, reason)

    def _end(self, state: str) -> None:
        self.state = state
        self.connection = None
        self.batches.drop()
        self.answer_pacing.drop()
        self.sends.detached()
        self.transaction.end()
        self.two_phase.detach()
        self.deliveries.cancel_all()
        self.registry.remove(self)
        self.answers.held.clear()
        self.deliveries.recovery.clear()
        self.answers.detached()
        self.reattachment.cancel()

    def describe(self) -> dict:
        """
        The session as the admin API shows it.
        """
        disconnected_for, expires_in = self.reattachment.describe()
        answers, deliveries = self.answers, self.deliveries
        return {
            "session_id": self.session_id,
            "client_id": self.client_id,
            "user": self.user,
            "protocol": self.protocol,
            "state": self.state,
            "ttl_ms": self.ttl_ms,
            "queued": len(self.own_queue.pending),
            "recovery": len(deliveries.recovery),
            "answers_held": len(answers.held),
            "subscriptions": len(deliveries.subscriptions),
            "unacknowledged": len(deliveries.owners),
            "last_command_id": answers.last_command_id,
            "processed_up_to": answers.processed_up_to,
            "resumable": self.resumable,
            "disconnected_for_s": disconnected_for,
            "expires_in_s": expires_in,
            **self.details,
        }


#: Machine factory: C{SERVED_SESSION_MACHINE(session)} returns the inputs
#: object.
SERVED_SESSION_MACHINE = _build_served_session_machine()


#: The frames that, while the session is C{open} (its machine's state, as
#: C{ServedSession.state} mirrors it), the connection's protocol hands
#: straight to the session's method, without Automat's transition (the
#: data path: one per message or per batch).  Any other state goes through
#: the machines, which refuse what has no transition.
HOT_FRAMES = {
    f.Send: ServedSession.take_send,
    f.SendBatch: ServedSession.take_send_batch,
    f.Ack: ServedSession.take_ack,
    f.AckThrough: ServedSession.take_ack_through,
    f.Credit: ServedSession.take_credit,
}
