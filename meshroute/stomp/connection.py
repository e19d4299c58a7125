"""
The router's side of one STOMP connection: a thin adapter between STOMP
frames and the served session (L{meshroute.sessions.served}), which does
the work for native and STOMP clients alike (docs/stomp.md).  Its stages
are the connection machine every client protocol shares
(L{meshroute.sessions.lifecycle}):

 - C{CONNECT} (or C{STOMP}) is the hello (C{awaiting_hello} →
   C{vetting}); any other frame before it ends the connection (C{ERROR}
   "... before CONNECT").  The verdict, within its handling: the
   version (L{meshroute.stomp.versions}: 1.2, 1.1 or 1.0), the heart-beats, whether this instance is the active one of
   its HA pair, C{max-sessions}, and, on a router with C{[security]},
   C{login} and C{passcode} (or a verified TLS client certificate):
   C{accepted} (a new session; C{CONNECTED}) or C{refused} (C{ERROR},
   then close).  STOMP authenticates in its hello: it has no
   C{authenticating} stage.
 - C{attached}: every frame is translated into the served session's
   native commands, numbered by this adapter (L{StompConnectionCore.serve}):
   a SEND or SUBSCRIBE to a queue or a topic as its destination says
   (L{meshroute.stomp.destinations}), a topic subscription durable,
   shared or mesh-wide as its headers say (L{meshroute.stomp.topic_options}).
 - C{DISCONNECT} is the goodbye (C{ending}): the session's C{Close}; once
   every command before it is done the session's C{Closed} becomes the
   C{RECEIPT} the client asked for, and the connection closes.  Frames
   that still arrive are ignored.
 - C{closing}: an C{ERROR} was sent (or the connection was dropped);
   anything that still arrives is ignored.

How the session's answers become STOMP (L{StompConnectionCore.write};
when each RECEIPT is due is L{meshroute.stomp.receipts}):

 - C{Opened} → C{CONNECTED}.
 - C{Confirm} of a command with a C{receipt} header → C{RECEIPT}; commands
   the session does not confirm get theirs from C{Processed}.
 - C{Error} of a command → C{ERROR} (with the command's C{receipt-id}),
   then close: STOMP has no error of one command.  The C{rolled-back}
   answers of a transaction's SENDs are not errors of the connection.
 - C{Deliver} → C{MESSAGE}; an C{ack:auto} subscription's deliveries are
   acknowledged once written, in one Ack per reactor turn, and their
   credit renewed.
 - C{Closed} → the C{RECEIPT} of C{DISCONNECT}.

The session sees a connection of native protocol version 2 (transactions,
no batches).  A STOMP session is never resumed (STOMP has no resume): it is
not resumable from its start, so a lost connection ends it
(C{session.disconnected} then C{session.expired}), its subscriptions end
and its unacknowledged deliveries go back to their queues, flagged
redelivered.  The connection TTL, partial frames, the buffer bound and
C{stage-valid-timeout} are every client connection's
(L{meshroute.sessions.connection_core.ConnectionCore}, whose data and I/O this
core extends); the TTL comes from the heart-beats
(L{meshroute.stomp.heartbeats}).
"""

from dataclasses import dataclass, field

from meshroute import __version__
from meshroute.expiry import now_ms
from meshroute.sessions.connection_core import ConnectionCore
from meshroute.sessions.connection_inputs import ConnectionInputs
from meshroute.sessions.served import STOMP
from meshroute.sessions.written_acks import WrittenAcks
from meshroute.stomp.settings import DEFAULT_HEARTBEAT_MS, DEFAULT_PREFETCH_COUNT
from meshroute.stomp.frames import (
    HEARTBEAT_BYTES,
    StompFrame,
    StompProtocolError,
    encode,
    read_as_1_0,
)
from meshroute.stomp.destinations import StompRefusal, send_address, subscription_source
from meshroute.stomp.heartbeats import HeartBeats
from meshroute.stomp.receipts import Receipts
from meshroute.stomp.subscriptions import ACK_MODES, AUTO, StompSubscription, StompSubscriptions
from meshroute.stomp.topic_options import (
    CLIENT_ID,
    RETAIN,
    forgets,
    refuse_on_queue,
    retain_header,
    subscribe_options,
)
from meshroute.stomp.versions import V1_0, V1_2, StompVersion, negotiated, spoken
from meshroute.wire import client_frames as f

#: The SEND headers that are STOMP's own, not the message's.
SEND_HEADERS = frozenset({"destination", "receipt", "transaction", "content-length",
                          "persistent", "duplicate-id", "expires", RETAIN})

#: The C{mechanism} of C{security.authenticated} for a STOMP login.
PASSCODE = "passcode"


def time_to_live_ms(expires: str | None, now: int) -> int:
    """
    The native time to live of a SEND's C{expires} (absolute epoch
    milliseconds, as ActiveMQ's; 0 or none: never): what is left of it
    C{now} (epoch milliseconds), at least 1 ms (an expiry already past
    expires the message at once).

    @raise StompRefusal: C{expires} is not a number.
    """
    if expires is None or expires == "0":
        return 0
    if not (expires.isascii() and expires.isdigit()):
        raise StompRefusal(f"expires {expires!r} is not epoch milliseconds")
    return max(1, int(expires) - now)


@dataclass(eq=False)
class StompConnectionCore(ConnectionCore):
    """
    One STOMP connection: the lifecycle's data and I/O (TTL, buffers,
    pausing, closing), and what the translation needs.

    @ivar prefetch_count: a SUBSCRIBE's credit when it names none.
    @ivar heartbeat_ms: the router's heart-beat offer C{(cx, cy)}.
    @ivar stomp: the version negotiated (L{meshroute.stomp.versions}), or
        None before.
    @ivar heartbeats: the heart-beats negotiated (L{HeartBeats}).
    @ivar receipts: the receipts the client asked for (L{Receipts}).
    @ivar transaction: the name of the open transaction, or None.
    @ivar subscriptions: the client's subscriptions (L{StompSubscriptions}).
    @ivar client_id: the CONNECT's C{client-id} (empty: none), the client
        id of its durable topic subscriptions whose SUBSCRIBE names none.
    """

    prefetch_count: int = DEFAULT_PREFETCH_COUNT
    heartbeat_ms: tuple[int, int] = DEFAULT_HEARTBEAT_MS
    stomp: StompVersion | None = None
    receipts: Receipts = field(default_factory=Receipts)
    transaction: str | None = None
    subscriptions: StompSubscriptions = field(default_factory=StompSubscriptions)
    client_id: str = ""
    heartbeats: HeartBeats = field(default_factory=HeartBeats)
    written_acks: WrittenAcks = field(init=False)

    AWAITED = "CONNECT"
    INACTIVE = ("not active: this router instance is not the active instance of its pair; "
                "try another endpoint")
    STOPPED_SERVING = ("not active: this router instance stopped serving; the other instance "
                       "of its pair takes over")
    LOG_NAME = "STOMP client"

    def __post_init__(self) -> None:
        super().__post_init__()
        self.written_acks = WrittenAcks(self)

    @property
    def stomp_version(self) -> str:
        "The version negotiated, as C{version} writes it (empty before)."
        return self.stomp.number if self.stomp is not None else ""

    # -- output ---------------------------------------------------------------

    def write(self, frame) -> None:
        """
        The served session's output, as STOMP (the module docstring's
        table).
        """
        if not self.connected or self.silent:
            return
        kind = type(frame)
        if kind is f.Deliver:
            self._message(frame)
        elif kind is f.Confirm:
            self._send_receipts(self.receipts.confirmed(frame.command_id))
        elif kind is f.Processed:
            self._send_receipts(self.receipts.processed(frame.command_id))
        elif kind is f.Error:
            self._error(frame)
        elif kind is f.Opened:
            self._connected(frame)
        elif kind is f.Closed and self.receipts.goodbye is not None:
            self._send_receipts([self.receipts.goodbye])

    def send(self, frame: StompFrame) -> None:
        self.transport.write(encode(frame, (self.stomp or V1_2).number))

    def not_allowed(self, frame: StompFrame) -> str:
        return f"{frame.command} is not allowed on this connection now"

    def before_hello(self, frame: StompFrame) -> str:
        return f"{frame.command} before CONNECT"

    def _send_receipts(self, receipts: list[str]) -> None:
        for receipt in receipts:
            self.send(StompFrame("RECEIPT", (("receipt-id", receipt),)))

    def _error(self, frame: f.Error) -> None:
        if frame.command_id == 0:
            headers = [("message", frame.detail), ("content-type", "text/plain")]
            if frame.code == f.UNSUPPORTED_VERSION:
                # As the 1.1 and 1.2 specifications ask.
                headers.append(("version", ",".join(spoken(self._ceiling()))))
            if self.receipts.failing is not None:
                headers.append(("receipt-id", self.receipts.failing))
            self.send(StompFrame("ERROR", tuple(headers),
                                 f"{frame.code}: {frame.detail}\n".encode()))
        elif self.receipts.refused(frame.command_id):
            self.machine.protocol_error(frame.code, frame.detail)

    def _connected(self, frame: f.Opened) -> None:
        headers = [("version", self.stomp.number)]
        if self.stomp.heart_beats:
            headers.append(("heart-beat", self.heartbeats.header))
        headers += [("session", frame.session_id), ("server", f"meshroute/{__version__}")]
        self.send(StompFrame("CONNECTED", tuple(headers)))
        self.heartbeats.start(self.clock, self._beat)

    def _beat(self) -> None:
        if self.connected and not self.silent:
            self.transport.write(HEARTBEAT_BYTES)

    def _message(self, frame: f.Deliver) -> None:
        subscription = self.subscriptions.by_number.get(frame.subscription)
        if subscription is None:
            return
        self.send(self.subscriptions.message(subscription, frame, self.stomp))
        if subscription.ack == AUTO:
            self.written_acks.written(subscription.number, frame.delivery_id)

    # -- opening ----------------------------------------------------------------

    def vet(self, inputs: ConnectionInputs, frame: StompFrame) -> None:
        """
        Decide on a CONNECT: C{inputs.accepted} or C{inputs.refused}.
        """
        accept_version = frame.header("accept-version")
        ceiling = self._ceiling()
        self.stomp = negotiated(accept_version, ceiling)
        if self.stomp is None:
            inputs.refused(f.UNSUPPORTED_VERSION,
                           f"supported protocol versions are {' '.join(spoken(ceiling))} "
                           f"(the client offered {accept_version})")
            return
        if self.stomp is V1_0:
            frame = read_as_1_0(frame)
        try:
            self.heartbeats = HeartBeats.negotiated(
                frame.header("heart-beat") if self.stomp.heart_beats else None,
                self.heartbeat_ms)
        except StompProtocolError as e:
            inputs.refused(f.BAD_COMMAND, e.reason)
            return
        refusal = self.serving_refusal()
        if refusal is not None:
            inputs.refused(*refusal)
            return
        if self.security is not None and not self.authentication.password_login(
                inputs, frame.header("login") or "", frame.header("passcode") or "", PASSCODE):
            return
        override = self.settings.connection_ttl_override
        self.ttl_ms = override if override != -1 else self.heartbeats.ttl_ms
        inputs.accepted(frame)

    def _ceiling(self) -> str | None:
        "Over WebSocket, the subprotocol's version: none above it is spoken."
        return getattr(self.transport, "protocol_version", None)

    def attach(self, frame: StompFrame) -> None:
        """
        A new session, which cannot be resumed; CONNECTED follows from
        its Opened.
        """
        session = self.new_session(protocol=STOMP, resumable=False)
        self.version = f.TRANSACTIONS_VERSION
        self.client_id = frame.header(CLIENT_ID) or ""
        session.start(self, f.Open([self.version], self.client_id or frame.header("login") or "",
                                   "", self.ttl_ms))

    # -- connected --------------------------------------------------------------

    def _receipt_after(self, frame: StompFrame) -> None:
        """
        The receipt of a frame that is not a command: due once every
        command before it is done.
        """
        self._send_receipts(self.receipts.after(frame, self.last_command,
                                                self.session.answers.processed_up_to))

    def serve(self, inputs: ConnectionInputs, frame: StompFrame) -> None:
        """
        Carry out a frame of the session's business, or DISCONNECT; one
        the adapter cannot is an C{ERROR}.
        """
        handler = _HANDLERS.get(frame.command)
        if frame.command != "SEND":
            self.flush_sends()
        try:
            if handler is None:
                raise StompRefusal(f"{frame.command} is not allowed once connected")
            handler(self, frame)
        except StompRefusal as e:
            self.receipts.failing = frame.header("receipt")
            inputs.protocol_error(f.BAD_COMMAND, e.detail)

    def _in_transaction(self, frame: StompFrame) -> bool:
        """
        Whether C{frame} belongs to the open transaction.  The session
        core holds one transaction for all the session's commands, so
        while one is open every SEND and ACK must name it.
        """
        name = frame.header("transaction")
        if name is None and self.transaction is None:
            return False
        if name != self.transaction:
            if self.transaction is None:
                raise StompRefusal(f"no transaction {name!r} is open")
            raise StompRefusal(f"transaction {self.transaction!r} is open: every "
                               f"{frame.command} must name it until COMMIT or ABORT")
        return True

    def on_send(self, frame: StompFrame) -> None:
        address = send_address(frame.header("destination"))
        transactional = self._in_transaction(frame)
        headers: dict[str, str] = {}
        for name, value in frame.headers:
            if name not in SEND_HEADERS and name not in headers:
                headers[name] = value
        headers.update(retain_header(frame))
        send = f.Send(self.next_command(), address, headers, frame.body,
                      frame.header("persistent") != "false", frame.header("duplicate-id") or "",
                      time_to_live_ms(frame.header("expires"), now_ms(self.clock)))
        problem = self.settings.limits.headers_problem(send)
        if problem is not None:
            self.machine.over_limit(problem)
            return
        self.receipts.expect(frame, send.command_id)
        if transactional:
            self.receipts.held.add(send.command_id)
        self.take_send(send)

    def _subscription_id(self, frame: StompFrame) -> str:
        """
        The C{id} a SUBSCRIBE or UNSUBSCRIBE names its subscription by; in
        STOMP 1.0, without one, its C{destination}.
        """
        subscription_id = frame.header("id")
        if subscription_id is None and not self.stomp.subscription_ids:
            subscription_id = frame.header("destination")
        if subscription_id is None:
            raise StompRefusal(f"{frame.command} has no id header")
        return subscription_id

    def on_subscribe(self, frame: StompFrame) -> None:
        """
        SUBSCRIBE: a C{Subscribe} to one of this router's queues, or a
        C{SubscribeTopic} (L{meshroute.stomp.topic_options}).  Its receipt
        comes with the session's C{Confirm}: once consuming started, or,
        for a topic, once the router made the subscription (a durable one
        recorded; a mesh-wide one's interest at every router reachable).
        """
        destination = frame.header("destination")
        source = subscription_source(destination, self.engine.name)
        subscription_id = self._subscription_id(frame)
        if subscription_id in self.subscriptions.by_id:
            raise StompRefusal(f"subscription {subscription_id!r} is already in use")
        ack = frame.header("ack", AUTO)
        if ack not in ACK_MODES:
            raise StompRefusal(f"ack {ack!r} is not one of {', '.join(ACK_MODES)}")
        prefetch = frame.header("prefetch-count")
        if prefetch is None:
            credit = self.prefetch_count
        elif prefetch.isdigit() and int(prefetch) > 0:
            credit = int(prefetch)
        else:
            raise StompRefusal(f"prefetch-count {prefetch!r} is not a positive number")
        if source.queue:
            refuse_on_queue(frame)
            topic = None
        else:
            topic = subscribe_options(frame, self.client_id)
        subscription = self.subscriptions.add(subscription_id, destination, ack, credit, topic)
        command_id = self.next_command()
        self.receipts.expect(frame, command_id)
        if topic is None:
            self.session.machine.got_subscribe(
                f.Subscribe(command_id, subscription.number, source.queue, credit))
        else:
            self.session.machine.got_subscribe_topic(f.SubscribeTopic(
                command_id, subscription.number, source.pattern, credit, topic.durable,
                topic.client_id, topic.shared, topic.mesh_wide, topic.retained))

    def on_unsubscribe(self, frame: StompFrame) -> None:
        """
        UNSUBSCRIBE: the session's C{Unsubscribe}; one naming the durable
        subscription it ends forgets it.
        """
        subscription_id = self._subscription_id(frame)
        subscription = self.subscriptions.by_id.get(subscription_id)
        if subscription is None:
            raise StompRefusal(f"no subscription {subscription_id!r}")
        forget = forgets(frame, subscription_id, subscription.topic, self.client_id)
        self.subscriptions.remove(subscription_id)
        command_id = self.next_command()
        self.receipts.expect(frame, command_id)
        self.session.machine.got_unsubscribe(
            f.Unsubscribe(command_id, subscription.number, forget))

    def _acknowledged(self, frame: StompFrame) -> tuple[StompSubscription | None, list[int]]:
        """
        The subscription and the session delivery ids an ACK or NACK
        covers (L{StompSubscriptions.covered}): it names one by C{id} in
        1.2, by C{message-id} in 1.1 and 1.0.
        """
        header = self.stomp.ack_header
        named = frame.header(header)
        if named is None:
            raise StompRefusal(f"{frame.command} has no {header} header")
        if header == "message-id":
            delivery_id = self.subscriptions.message_ids.get(named)
        else:
            delivery_id = int(named) if named.isdigit() else None
        return self.subscriptions.covered(delivery_id, self.session.deliveries)

    def on_ack(self, frame: StompFrame) -> None:
        # In the open transaction (the core holds it) or outside any.
        self._in_transaction(frame)
        subscription, ids = self._acknowledged(frame)
        if not ids or subscription.ack == AUTO:
            self._receipt_after(frame)
            return
        command_id = self.next_command()
        self.receipts.expect(frame, command_id)
        self.session.take_ack(f.Ack(command_id, ids))
        if self.session is not None:
            self.session.take_credit(f.Credit(self.next_command(), subscription.number, len(ids)))

    def on_nack(self, frame: StompFrame) -> None:
        if not self.stomp.nack:
            raise StompRefusal(f"NACK is not a command of STOMP {self.stomp.number}")
        self._in_transaction(frame)
        _, ids = self._acknowledged(frame)
        self.session.deliveries.give_back(ids)
        self._receipt_after(frame)

    def on_begin(self, frame: StompFrame) -> None:
        name = frame.header("transaction")
        if name is None:
            raise StompRefusal("BEGIN has no transaction header")
        if self.transaction is not None:
            raise StompRefusal(f"transaction {self.transaction!r} is open: a session has one "
                               "transaction at a time")
        self.transaction = name
        command_id = self.next_command()
        self.receipts.expect(frame, command_id)
        self.session.machine.got_begin(f.Begin(command_id))

    def on_commit(self, frame: StompFrame) -> None:
        self._end_transaction(frame, f.Commit, self.session.machine.got_commit)

    def on_abort(self, frame: StompFrame) -> None:
        self._end_transaction(frame, f.Rollback, self.session.machine.got_rollback)

    def _end_transaction(self, frame: StompFrame, command, feed) -> None:
        name = frame.header("transaction")
        if name is None or name != self.transaction:
            raise StompRefusal(f"no transaction {name!r} is open")
        self.transaction = None
        command_id = self.next_command()
        self.receipts.expect(frame, command_id)
        feed(command(command_id))

    def disconnect(self, frame: StompFrame) -> None:
        """
        DISCONNECT: the session's Close; its Closed brings the receipt.
        """
        self.receipts.goodbye = frame.header("receipt")
        self.session.machine.got_close(f.Close(self.next_command()))

    # -- closing ----------------------------------------------------------------

    def fell_silent(self) -> None:
        """
        No more heart-beats, nor acknowledgements of what was written.
        """
        self.heartbeats.stop()
        self.written_acks.stop()


_HANDLERS = {
    "SEND": StompConnectionCore.on_send,
    "SUBSCRIBE": StompConnectionCore.on_subscribe,
    "UNSUBSCRIBE": StompConnectionCore.on_unsubscribe,
    "ACK": StompConnectionCore.on_ack,
    "NACK": StompConnectionCore.on_nack,
    "BEGIN": StompConnectionCore.on_begin,
    "COMMIT": StompConnectionCore.on_commit,
    "ABORT": StompConnectionCore.on_abort,
    "DISCONNECT": StompConnectionCore.disconnect,
}
