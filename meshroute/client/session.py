"""
The client's side of one session, across connections: a state machine
(L{ClientMachine}, an explicit transition table) over a L{ClientCore}, in
the shape of Twisted's C{ClientService} (the core holds the endpoint, the
clock and the retry schedules; every timer comes from the injected clock),
speaking docs/client-protocol.md ("Sessions that survive failures").

States are named for what they wait for, inputs (L{ClientInputs}) for
what happened; a frame or call the current state has no transition for
raises C{NoTransition} before any behaviour runs (a frame then breaks the
connection as a protocol error).  Reading the table top to bottom::

    state                 input                       next                  what it does
    ────────────────────  ──────────────────────────  ────────────────────  ─────────────────────────────────────
    connecting            connection_made             opening               Open(new session)
                          connect_failed              waiting_to_retry      next initial-connect delay (or exhausted)
    opening               got_mechanisms/challenge/   opening               authenticate (version 5; below)
                            authenticated
                          got_opened                  connected             fire connect()'s Deferred
                          got_refusal                 disconnected          connect() fails with the router's code
                          got_not_active              waiting_to_retry      the next endpoint (or the next delay)
                          connection_failed           waiting_to_retry      next initial-connect delay (or exhausted)
    waiting_to_retry      retry_due                   connecting            connect again
                          exhausted                   disconnected          connect() fails
    connected             got_confirm/got_error/…     connected             answers, deliveries, Processed, pings
                          submit                      connected             write, or queue when the window is full
                          connection_failed           waiting_to_reconnect  next reconnect delay (or exhausted)
                          close_requested             closing               acks, then Close
    waiting_to_reconnect  retry_due                   reconnecting          connect again
                          exhausted                   disconnected          DISCONNECT; pending calls unblocked
    reconnecting          connection_made             reopening             Open(session id, answered, delivered)
                          connect_failed              waiting_to_reconnect  next delay (or exhausted)
    reopening             got_mechanisms/challenge/   reopening             authenticate again, as the same user
                            authenticated
                          got_opened(reattached)      connected             replay commands above last_command_id; FAILOVER
                          got_opened(new session)     connected             recreate: unblock, re-subscribe; FAILOVER
                          got_stale_opened            waiting_to_reconnect  refuse an older epoch: the next endpoint
                          got_refusal/not_active/     waiting_to_reconnect  next endpoint or delay (or exhausted)
                            connection_failed
    waiting_to_reconnect, submit, turn_ended          (same)                queue the command, this turn's acks
      reconnecting, reopening
    closing               got_closed                  closing               close the connection
                          connection_failed           closed                close() fires
    the first three and   close_requested             closed                calls in progress unblocked
      the down three
    all but closed and    forgotten                   closed                warn where the client was made;
      disconnected                                                          Close if connected
    closing, closed,      submit                      (same)                the call fails (SessionError)
      disconnected
    every state           transaction_ended           (same)                commit/rollback, in order after the
                                                                            sends before it

The first connection retries under C{initial-connect-attempts}, later
ones under C{reconnect-attempts}, each with its own
L{RetrySchedule} (Artemis' rule, shared with the routing connectors).
The client's endpoints (one, or several: the instances of a pair) are
tried in turn by an L{EndpointRotation}, also shared with the routing
connectors: an attempt at each endpoint is one round, the schedule's
delay comes between rounds, and both attempt counts count rounds.
Every failure of an established connection (lost, silent past
C{client-failure-check-period}, broken by a protocol error, refused by the
router) leads to C{waiting_to_reconnect}; the connection itself is let go
at once, so a late C{connectionLost} of it is ignored.

The instances of a high-availability pair (docs/ha.md, "Clients"): an
instance that is not the active one refuses Open with C{not-active}, and
the client tries the next endpoint as after a failed attempt (the first
connection too: unlike other refusals, this one is about the instance,
not the client).  A version-3 router's Opened (L{f.OpenedWithTopology})
names the pair's endpoints, which join the rotation after those the
client was given (L{ClientCore.learn_topology}), and its epoch: the client
keeps the highest epoch it has seen, and refuses an instance that answers
with a lower one (a stale instance that still believes it is active),
closing that connection before writing anything there
(C{got_stale_opened}, decided by L{ClientCore.stale}).  The session the
new active instance makes is a recreated one, as at any other router.

A router with users answers a version-5 Open with the mechanisms it
accepts (L{f.Mechanisms}) before Opened: the client authenticates with
SCRAM-SHA-256 when it has a password (C{ClientOptions.user} and
C{password}), else with its TLS client certificate (C{EXTERNAL}) when the
router offers that, and checks the router's own proof in
L{f.Authenticated} (L{ClientCore.authenticate}, L{ClientCore.respond},
L{ClientCore.check_router}); the Open timeout covers the exchange.  A
router that needs a password the client lacks is a refusal
(C{not-authenticated}), as the router's own refusals are.

A transacted client (C{ClientOptions.transacted}) issues a C{Begin}
before the first send or acknowledgement of each transaction, and
C{commit()} / C{rollback()} end it (L{ClientCore.end_transaction}).  When
the session is lost (recreated, or given up on), its transactions are
lost with it (L{ClientCore.lose_transactions}): what was not committed
is rolled back, a commit in flight has an unknown outcome, and the
current transaction, if it had work, can only roll back.
"""

import itertools
from collections.abc import Callable
from operator import itemgetter
from typing import Protocol

from automat import NoTransition
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import connectProtocol
from twisted.internet.interfaces import IDelayedCall, IReactorTime, IStreamClientEndpoint
from twisted.logger import Logger

from meshroute.client.commands import (
    ACK,
    BEGIN,
    CLOSE,
    COMMIT,
    CREDIT,
    ROLLBACK,
    SEND,
    SEND_BATCH,
    SUBSCRIBE,
    UNSUBSCRIBE,
    Command,
    CommandLog,
    SendOutcomes,
    Transaction,
)
from meshroute.client.errors import CLOSED as CLOSED_CODE
from meshroute.client.errors import (
    CONNECTION_LOST,
    NOT_TRANSACTED,
    STALE_EPOCH,
    TIMEOUT,
    ClientError,
    SendError,
    SessionError,
    SubscribeError,
    TransactionOutcomeUnknown,
    TransactionRolledBack,
    UnblockedError,
)
from meshroute.client.ending import Ending
from meshroute.client.traffic_timer import TrafficTimer
from meshroute.client.options import DISCONNECT, FAILOVER, ClientOptions
from meshroute.client.router_protocol import RouterProtocol
from meshroute.client.subscriptions import Subscription
from meshroute.wire import client_frames as f
from meshroute.link.retry import RetrySchedule
from meshroute.security.scram import MECHANISM as SCRAM
from meshroute.security.scram import ScramClient, ScramError
from meshroute.link.rotation import EndpointRotation
from meshroute.wire.codec import encode

log = Logger()

#: Most messages, and most bytes of bodies, one SendBatch carries: a
#: turn's sends past either go in the next one, so that a SendBatch stays
#: within the router's frame limit (a message too large for the bytes
#: alone still fits: L{f.oversized_send} checked it as a Send).
SEND_BATCH_MAX_MESSAGES = 1000
SEND_BATCH_MAX_BYTES = 1024 * 1024

#: A SendBatch item's body.
_BODY = itemgetter(2)

#: How a failover went, as L{ClientCore.last_failover} says.
REATTACHED = "reattached"
RECREATED = "recreated"


class ClientInputs(Protocol):
    """
    Everything that can happen to a client's session: the inputs of
    L{ClientMachine}.
    """

    def connection_made(self, protocol: RouterProtocol) -> None:
        "A connection attempt succeeded; C{protocol} speaks for it."

    def connect_failed(self, why: ClientError) -> None:
        "A connection attempt failed."

    def got_opened(self, frame: f.Opened) -> None:
        "The router answered Open."

    def got_refusal(self, frame: f.Error) -> None:
        "The router is closing the connection for C{frame.code} (Error with id 0)."

    def got_not_active(self, frame: f.Error) -> None:
        """
        The router instance is not the active one of its pair, and is
        closing the connection (Error(0, not-active)): try another.
        """

    def got_stale_opened(self, frame: f.Opened) -> None:
        """
        The router answered Open with an epoch lower than one the client
        has seen: a stale instance.
        """

    def got_mechanisms(self, frame: f.Mechanisms) -> None:
        "The router needs the client to authenticate (version 5)."

    def got_challenge(self, frame: f.Challenge) -> None:
        "The router's SCRAM challenge."

    def got_authenticated(self, frame: f.Authenticated) -> None:
        "The router accepted the client's proof, and gives its own."

    def got_confirm(self, frame: f.Confirm) -> None:
        "A command succeeded."

    def got_confirmed(self, frame: f.Confirmed) -> None:
        "The router confirmed a run of sends (version 4)."

    def got_deliver_batch(self, frame: f.DeliverBatch) -> None:
        "Deliveries for a subscription (version 4)."

    def got_error(self, frame: f.Error) -> None:
        "A command was refused."

    def got_deliver(self, frame: f.Deliver) -> None:
        "A message for a subscription."

    def got_processed(self, frame: f.Processed) -> None:
        "Every command up to an id was carried out."

    def got_ping(self, frame: f.Ping) -> None:
        "The router checks that we are alive."

    def got_pong(self, frame: f.Pong) -> None:
        "The router answered a ping."

    def got_closed(self, frame: f.Closed) -> None:
        "The router finished the session we closed."

    def got_expired(self, frame: f.Expired) -> None:
        "A message we sent asking to be told expired before it was delivered (version 6)."

    def connection_failed(self, why: ClientError) -> None:
        """
        The connection in use is gone: lost, silent for the failure check
        period, broken by a protocol error, or Open timed out.
        """

    def retry_due(self) -> None:
        "The wait before the next connection attempt is over."

    def exhausted(self, why: ClientError) -> None:
        "No attempt is left: give up."

    def submit(self, command: Command) -> None:
        "The application (or the client itself) issues a command."

    def transaction_ended(self, commit: bool, deferred: Deferred) -> None:
        """
        The application commits or rolls back; C{deferred} fires with the
        outcome.  An input like C{submit}, so that it is taken after the
        sends the application made before it, also from a callback the
        session fires while it handles a frame.
        """

    def ping_requested(self, deferred: Deferred) -> None:
        "The application asks for a round trip."

    def turn_ended(self) -> None:
        "The end of a reactor turn: write its acks, credit and Received."

    def close_requested(self) -> None:
        "The application closes the client."

    def forgotten(self) -> None:
        "The application dropped the client without closing it."


class ClientCore:
    """
    The state of one client session across its connections, and its I/O.
    The machine decides; the core does.

    @ivar session_id: the session's id ("" before the first Opened).
    @ivar router: the router's name.
    @ivar ttl_ms: the connection TTL in force.
    @ivar generation: bumped each time the session is recreated; messages
        delivered in an earlier generation can no longer be acknowledged.
    @ivar last_failover: L{REATTACHED} or L{RECREATED}: how the latest
        failure was survived (None if none was).
    @ivar end: why the session ended, if not by L{close}.
    @ivar transaction: the current L{Transaction} of a transacted client.
    @ivar epoch: the highest epoch a router of the pair told (0: none).
    """

    def __init__(self, clock: IReactorTime, endpoints: EndpointRotation, options: ClientOptions,
                 client_id: str, created_at: str,
                 endpoint_from_string: Callable[[str], IStreamClientEndpoint]) -> None:
        """
        @param endpoint_from_string: makes the endpoint of an endpoint
            string a router tells (its pair's instances).
        """
        self.clock = clock
        self.endpoint_from_string = endpoint_from_string
        self.epoch = 0
        self.options = options
        self.client_id = client_id
        self.created_at = created_at
        self.endpoints = endpoints
        self._initial = RetrySchedule(
            options.retry_interval_ms, options.retry_interval_multiplier,
            options.max_retry_interval_ms,
            -1 if options.initial_connect_attempts == -1 else options.initial_connect_attempts - 1,
        )
        self._reconnect = RetrySchedule(
            options.retry_interval_ms, options.retry_interval_multiplier,
            options.max_retry_interval_ms, options.reconnect_attempts,
        )
        self.machine: ClientInputs | None = None
        self.protocol: RouterProtocol | None = None
        self.traffic = TrafficTimer(clock, self._keepalive_ping, self._silent)
        self._attempt: Deferred | None = None
        self._attempt_token: object = None
        self._retry_call: IDelayedCall | None = None
        self._open_timer: IDelayedCall | None = None
        self._flush_call: IDelayedCall | None = None
        self._resuming = False
        self._refusal: ClientError | None = None
        self._scram: ScramClient | None = None
        self._orderly = False
        self.session_id = ""
        self.router: str | None = None
        self.ttl_ms = options.ttl_ms
        self.generation = 0
        self.log = CommandLog(options.confirmation_window_size)
        self.transaction = Transaction()
        # A transacted client speaks only versions with transactions: a
        # router without them refuses it at Open (unsupported-version).
        self._versions = [v for v in f.SUPPORTED_VERSIONS
                          if not options.transacted or v >= f.TRANSACTIONS_VERSION]
        self.subscriptions: dict[int, Subscription] = {}
        self.subscription_numbers = itertools.count(1)
        self.version = 0
        self._sends: list = []
        self._send_segments: list[tuple] = []
        self._send_bytes = 0
        self._acks: list[int] = []
        self._through: dict[Subscription, int] = {}
        self._credit: dict[Subscription, int] = {}
        self.delivered_up_to = 0
        self._reported = (0, 0)
        self._pings: dict[int, tuple[Deferred | None, float]] = {}
        self._ping_numbers = itertools.count(1)
        self.listeners: list[Callable[[str], object]] = []
        self.expiry_listeners: list[Callable[[str, str, str], object]] = []
        self.last_failover: str | None = None
        self.end: ClientError | None = None
        self.finished = False
        self._closing = Ending()
        self.opened: Deferred | None = Deferred(lambda d: self.machine.close_requested())
        self._client_until_opened = None

    # -- connection attempts ----------------------------------------------------

    def start_attempt(self) -> None:
        """
        Connect once through the endpoint.
        """
        token = self._attempt_token = object()
        protocol = RouterProtocol(self, self.options.max_frame_size)

        def made(protocol: RouterProtocol) -> None:
            if self._attempt_token is token:
                self._attempt = self._attempt_token = None
                self.machine.connection_made(protocol)
            else:
                protocol.transport.abortConnection()

        def failed(failure) -> None:
            if self._attempt_token is token:
                self._attempt = self._attempt_token = None
                self.machine.connect_failed(
                    SessionError(CONNECTION_LOST, failure.getErrorMessage()))

        attempt = connectProtocol(self.endpoints, protocol)
        if self._attempt_token is token:
            self._attempt = attempt
        attempt.addCallbacks(made, failed)

    def attach(self, protocol: RouterProtocol, resume: bool) -> None:
        """
        Speak through C{protocol}: send Open (resuming the session if
        C{resume} and we can) and wait for the answer.
        """
        self.protocol = protocol
        self._refusal = None
        self._resuming = resume and bool(self.session_id) and self.log.window >= 0
        if self._resuming:
            answered, delivered = self.log.answered_up_to(), self.delivered_up_to
            self._reported = (answered, delivered)
            frame = f.Open(self._versions, self.client_id, self.session_id,
                           self.options.ttl_ms, answered, delivered)
        else:
            frame = f.Open(self._versions, self.client_id, "", self.options.ttl_ms)
        self.write_frame(frame)
        self._open_timer = self.clock.callLater(self.options.open_timeout_ms / 1000,
                                                self._open_timed_out)

    def _open_timed_out(self) -> None:
        self._open_timer = None
        self.machine.connection_failed(SessionError(
            TIMEOUT, f"no answer to Open within {self.options.open_timeout_ms / 1000:g} s"))

    def detach(self) -> None:
        """
        Let the current connection go (aborting it): whatever it still
        delivers is ignored.  Pings in flight will never be answered.
        """
        protocol, self.protocol = self.protocol, None
        self.traffic.stop()
        _cancel(self._open_timer)
        self._open_timer = None
        if protocol is not None and protocol.transport is not None:
            protocol.transport.abortConnection()
        pings, self._pings = self._pings, {}
        for d, _ in pings.values():
            if d is not None:
                d.errback(UnblockedError("the connection failed before the Pong"))

    def attempt_failed(self, why: ClientError, first: bool) -> None:
        """
        A connection attempt (or the connection) failed: wait for the next
        attempt, or give up when the schedule is exhausted.
        """
        self.detach()
        failed = self.endpoints.current
        delay = self.endpoints.delay_after_failure(self._initial if first else self._reconnect)
        if delay is None:
            self.machine.exhausted(why)
            return
        log.info("client {client_id}: {why} (at {endpoint}); connecting to {next} "
                 "in {delay:g} s", client_id=self.client_id, why=str(why), endpoint=failed,
                 next=self.endpoints.upcoming, delay=delay)
        self._retry_call = self.clock.callLater(delay, self._retry_due)

    def _retry_due(self) -> None:
        self._retry_call = None
        self.machine.retry_due()

    def connection_failed(self, why: ClientError) -> None:
        """
        The established connection failed: the session waits to be
        resumed (or recreated).
        """
        why = self._refusal or why
        log.warn("client {client_id}: connection to router {router} at {endpoint} failed: {why}",
                 client_id=self.client_id, router=self.router, endpoint=self.endpoints.current,
                 why=str(why))
        self.attempt_failed(why, first=False)

    def broken(self, detail: str) -> None:
        """
        The router broke the protocol: the connection is failed.
        """
        log.warn("router {router} broke the client protocol: {detail}",
                 router=self.router or "?", detail=detail)
        self.machine.connection_failed(SessionError(f.PROTOCOL_ERROR, detail))

    def _silent(self, seconds: float) -> None:
        self.machine.connection_failed(SessionError(
            CONNECTION_LOST, f"nothing received for {seconds:g} s "
            f"(client-failure-check-period {self.options.client_failure_check_period_ms} ms)"))

    # -- the session opened -------------------------------------------------------

    def stale(self, frame: f.Opened) -> bool:
        """
        Whether C{frame} comes from an instance serving an older epoch than
        one the client has seen (a router that does not tell its epoch
        counts as epoch 0, as a router without HA).
        """
        return _epoch_of(frame) < self.epoch

    def refuse_stale(self, frame: f.Opened, first: bool) -> None:
        """
        Close the connection to a stale instance, and go on as after a
        failed attempt.
        """
        epoch = _epoch_of(frame)
        log.info("client {client_id}: router {router} at {endpoint} serves epoch {epoch}, "
                 "older than epoch {seen}; trying the next endpoint", client_id=self.client_id,
                 router=frame.router, endpoint=self.endpoints.current, epoch=epoch,
                 seen=self.epoch)
        self.attempt_failed(SessionError(
            STALE_EPOCH, f"router {frame.router} at {self.endpoints.current} serves epoch "
            f"{epoch}, older than epoch {self.epoch}"), first)

    def turned_away(self, frame: f.Error, first: bool) -> None:
        """
        The router refused the Open, and a retry may do better: go on as
        after a failed attempt.
        """
        self.attempt_failed(SessionError(frame.code, frame.detail), first)

    def authenticate(self, frame: f.Mechanisms) -> None:
        """
        Answer the router's mechanisms: SCRAM with a password, else a TLS
        certificate; with neither, refuse (as the router would).
        """
        options = self.options
        if options.password is not None and SCRAM in frame.mechanisms:
            self._scram = ScramClient(options.user, options.password)
            self.write_frame(f.Authenticate(SCRAM, self._scram.first()))
        elif f.EXTERNAL in frame.mechanisms:
            self._scram = None
            self.write_frame(f.Authenticate(f.EXTERNAL, b""))
        else:
            self.machine.got_refusal(f.Error(0, f.NOT_AUTHENTICATED, (
                f"router at {self.endpoints.current} requires authentication "
                f"({', '.join(frame.mechanisms)}): give a user and password, or a client "
                "certificate")))

    def respond(self, frame: f.Challenge) -> None:
        """
        Answer the SCRAM challenge with the proof.
        """
        if self._scram is None:
            self.broken("a Challenge the client did not ask for")
            return
        try:
            self.write_frame(f.AuthResponse(self._scram.final(frame.data)))
        except ScramError as e:
            self.broken(f"the router's SCRAM challenge: {e}")

    def check_router(self, frame: f.Authenticated) -> None:
        """
        Check the router's proof that it holds the user's credentials
        (mutual authentication); Opened follows.
        """
        scram, self._scram = self._scram, None
        if scram is None:
            return
        try:
            scram.verify(frame.data)
        except ScramError as e:
            self.broken(f"router at {self.endpoints.current} did not prove it knows the "
                        f"user's credentials: {e}")

    def learn_topology(self, frame: f.OpenedWithTopology) -> None:
        """
        Keep the highest epoch, and try the pair's endpoints too (after the
        configured ones, each once, compared as strings).
        """
        self.epoch = max(self.epoch, frame.epoch)
        known = set(self.endpoints.descriptions)
        for description in frame.endpoints:
            if description in known:
                continue
            known.add(description)
            try:
                endpoint = self.endpoint_from_string(description)
            except Exception as e:
                log.warn("client {client_id}: router {router} names the endpoint {endpoint!r} "
                         "of its pair, which cannot be used: {why}", client_id=self.client_id,
                         router=frame.router, endpoint=description, why=str(e))
                continue
            self.endpoints.add(description, endpoint)

    def _opened(self, frame: f.Opened) -> None:
        _cancel(self._open_timer)
        self._open_timer = None
        self.router = frame.router
        self.version = frame.version
        self.ttl_ms = frame.ttl_ms
        self.endpoints.connected()
        if isinstance(frame, f.OpenedWithTopology):
            self.learn_topology(frame)
        self.traffic.start(frame.ttl_ms, self.options.client_failure_check_period_ms)

    def opened_first(self, frame: f.Opened) -> None:
        """
        The first session is open: hand the client to the application.
        """
        self._opened(frame)
        self._initial.reset()
        self.session_id = frame.session_id
        d, client = self.opened, self._client_until_opened
        self.opened = self._client_until_opened = None
        d.callback(client)
        self.drain()

    def reopened(self, frame: f.Opened) -> None:
        """
        A reconnection succeeded: carry on with the session if the router
        still had it, else recreate it.  Either way the listeners hear
        FAILOVER.
        """
        self._opened(frame)
        self._reconnect.reset()
        if self._resuming and frame.reattached and frame.session_id == self.session_id:
            last = frame.last_command_id
            if last > self.log.last_id:
                self.broken(f"router received command {last} of the session, "
                            f"but only {self.log.last_id} were sent")
                return
            replay = self.log.to_replay(last)
            log.info("client {client_id}: session {session} reattached; replaying "
                     "{count} commands", client_id=self.client_id, session=self.session_id,
                     count=len(replay))
            for data in replay:
                self.write(data)
            self.last_failover = REATTACHED
            self.drain()
            self.schedule_flush()
            self.notify(FAILOVER)
        else:
            self.recreate(frame)

    def recreate(self, frame: f.Opened) -> None:
        """
        The session is gone: this is a new one.  Calls in progress whose
        outcome is unknown fail with L{UnblockedError}; subscriptions are
        made again with the same numbers; calls not yet written go out in
        the new session.
        """
        log.info("client {client_id}: session {old} is gone; recreated as {new}",
                 client_id=self.client_id, old=self.session_id, new=frame.session_id)
        self.session_id = frame.session_id
        self.generation += 1
        self.delivered_up_to = 0
        self._reported = (0, 0)
        unknown, waiting = self.lose_transactions(
            self.log.new_session(), list(self.log.waiting),
            f"the session was lost and recreated as {frame.session_id}")
        self.log.waiting.clear()
        # Every subscription the application holds is made again, whether
        # or not its re-subscription of an earlier recreation was answered
        # (or even written): those are void.
        again = [self._resubscribe(s) for _, s in sorted(self.subscriptions.items())
                 if s.active and s.confirmed]
        waiting = [c for c in waiting if not _is_resubscription(c)]
        subscribing = {c.subscription for c in again + waiting if c.kind == SUBSCRIBE}
        unblocked = [c for c in unknown if not _is_resubscription(c)]
        kept: list[Command] = []
        for command in waiting:
            if command.kind in (ACK, CREDIT):
                continue
            if command.kind == UNSUBSCRIBE and command.subscription not in subscribing:
                unblocked.append(command)
                continue
            kept.append(command)
        self.log.waiting.extend(again + kept)
        self.last_failover = RECREATED
        self.drain()
        error = UnblockedError(f"the session was lost and recreated as {frame.session_id}")
        for command in unblocked:
            self._unblock(command, error)
        self.notify(FAILOVER)

    def _resubscribe(self, subscription: Subscription) -> Command:
        credit = subscription.restart()
        number, queue = subscription.number, subscription.queue
        return Command(SUBSCRIBE, f.Subscribe, (number, queue, credit), None, subscription)

    def refused(self, frame: f.Error) -> None:
        """
        The router refused the first Open.
        """
        self.finish(SessionError(frame.code, frame.detail), "the router refused the session")

    # -- frames of an open session ------------------------------------------------

    def _check_id(self, command_id: int, what: str) -> bool:
        if command_id > self.log.last_id:
            self.broken(f"{what} for command {command_id}, which was not sent")
            return False
        return True

    def confirm(self, frame: f.Confirm) -> None:
        if not self._check_id(frame.command_id, "Confirm"):
            return
        command = self.log.answered(frame.command_id)
        if command is not None:
            d = command.deferred
            if command.kind in (SEND, SEND_BATCH):
                # A batch held in a transaction is answered message by message.
                d.answered(frame.command_id - command.command_id, [frame.msg_id])
            elif command.kind == SUBSCRIBE:
                command.subscription.confirmed = True
                if d is not None:
                    d.callback(command.subscription)
            elif command.kind in (COMMIT, ROLLBACK):
                d.callback(None)
            else:
                self.subscriptions.pop(command.subscription.number, None)
                command.subscription._finish(None)
                d.callback(None)
        self.drain()
        self.schedule_flush()

    def error(self, frame: f.Error) -> None:
        if not self._check_id(frame.command_id, "Error"):
            return
        command = self.log.answered(frame.command_id)
        if command is None:
            log.warn("router refused command {command}: {code} {detail}",
                     command=frame.command_id, code=frame.code, detail=frame.detail)
        elif command.kind in (SEND, SEND_BATCH):
            error = (TransactionRolledBack if frame.code == f.ROLLED_BACK else SendError)(
                frame.code, frame.detail)
            command.deferred.failed(frame.command_id - command.command_id, error)
        elif command.kind in (COMMIT, ROLLBACK) or frame.code == f.ROLLED_BACK:
            command.deferred.errback(TransactionRolledBack(frame.code, frame.detail))
        else:
            subscription = command.subscription
            error = SubscribeError(frame.code, frame.detail)
            if command.kind == SUBSCRIBE:
                self.subscriptions.pop(subscription.number, None)
                subscription._finish(error)
            if command.deferred is not None:
                command.deferred.errback(error)
            else:
                log.warn("router refused to subscribe {queue} again: {code} {detail}",
                         queue=subscription.queue, code=frame.code, detail=frame.detail)
        self.drain()
        self.schedule_flush()

    def confirmed(self, frame: f.Confirmed) -> None:
        """
        Version 4: the sends C{first_command_id} on succeeded, one message
        id each.
        """
        first, msg_ids = frame.first_command_id, frame.msg_ids
        if not self._check_id(first + len(msg_ids) - 1, "Confirmed"):
            return
        runs = self.log.answered_run(first, len(msg_ids))
        for command, offset, start, n in runs:
            if command.kind not in (SEND, SEND_BATCH):
                self.broken(f"Confirmed for command {command.command_id + offset}, which is "
                            "not a send")
                return
        for command, offset, start, n in runs:
            command.deferred.answered(offset, msg_ids[start:start + n] if n < len(msg_ids)
                                      else msg_ids)
        self.drain()
        self.schedule_flush()

    def deliver(self, frame: f.Deliver) -> None:
        if frame.delivery_id <= self.delivered_up_to:
            # Re-sent after a reattachment although we had it.
            return
        self.delivered_up_to = frame.delivery_id
        self.schedule_flush()
        subscription = self.subscriptions.get(frame.subscription)
        if subscription is not None and subscription.active:
            subscription._delivered(frame.delivery_id, frame.msg_id, frame.origin,
                                    frame.headers, frame.body, frame.redelivered,
                                    self.generation)
        # Otherwise it is being cancelled: the router gives the message
        # back to the queue.

    def deliver_batch(self, frame: f.DeliverBatch) -> None:
        """
        Version 4: a subscription's deliveries of one turn, each as a
        Deliver's fields.
        """
        self.schedule_flush()
        subscription = self.subscriptions.get(frame.subscription)
        generation = self.generation
        for delivery_id, msg_id, origin, headers, body, redelivered in frame.deliveries:
            if delivery_id <= self.delivered_up_to:
                continue
            self.delivered_up_to = delivery_id
            if subscription is not None and subscription.active:
                subscription._delivered(delivery_id, msg_id, origin, headers, body,
                                        redelivered, generation)

    def processed(self, frame: f.Processed) -> None:
        if not self._check_id(frame.command_id, "Processed"):
            return
        self.log.processed(frame.command_id)
        self.drain()
        self.schedule_flush()

    def refusal(self, frame: f.Error) -> None:
        """
        Error(0) on an open session: the router closes the connection
        next, and this is why.
        """
        self._refusal = SessionError(frame.code, frame.detail)

    def pong(self, frame: f.Ping) -> None:
        self.write_frame(f.Pong(frame.n))

    def got_pong(self, frame: f.Pong) -> None:
        waiting = self._pings.pop(frame.n, None)
        if waiting is not None and waiting[0] is not None:
            d, sent_at = waiting
            d.callback(self.clock.seconds() - sent_at)

    def closed_by_router(self) -> None:
        self._orderly = True
        self.protocol.transport.loseConnection()

    # -- commands -----------------------------------------------------------------

    def submit(self, command: Command) -> None:
        """
        Write C{command} now, or queue it behind those waiting for room.
        """
        for command in self._in_transaction(command):
            data = self.log.write_now(command)
            if data is not None:
                self.write(data)

    def send_later(self, messages: list, target, index: int = 0) -> None:
        """
        C{Client.send} and the like: C{messages} (SendBatch items), the
        sends of C{target} (a L{SendDeferred} or L{SendGroup}) from
        C{index} on, join this turn's sends, written together at the end of
        the turn, or before any other command so that commands keep their
        order (L{release_sends}); at a bound (L{SEND_BATCH_MAX_MESSAGES},
        L{SEND_BATCH_MAX_BYTES}), at once.  Without a version-4 session (an
        older router, or none opened yet) each is a Send command at once,
        as always.
        """
        if self.version < f.BATCH_VERSION or self.finished:
            submit = self.machine.submit
            for i, message in enumerate(messages, index):
                submit(Command(SEND, f.Send, tuple(message), SendOutcomes(1, [(0, target, i)])))
            return
        if len(messages) == 1:
            # One message (a Client.send): the common case, kept cheap.
            sends = self._sends
            self._send_segments.append((len(sends), target, index))
            sends.append(messages[0])
            self._send_bytes += len(messages[0][2])
            if (len(sends) >= SEND_BATCH_MAX_MESSAGES
                    or self._send_bytes >= SEND_BATCH_MAX_BYTES):
                self.release_sends()
            else:
                self.schedule_flush()
            return
        taken, total = 0, len(messages)
        while taken < total:
            sends = self._sends
            chunk = messages[taken:taken + SEND_BATCH_MAX_MESSAGES - len(sends)]
            size = self._send_bytes + sum(map(len, map(_BODY, chunk)))
            if size >= SEND_BATCH_MAX_BYTES:
                chunk, size = _within_bytes(chunk, self._send_bytes)
            self._send_segments.append((len(sends), target, index + taken))
            sends.extend(chunk)
            self._send_bytes = size
            taken += len(chunk)
            if len(sends) >= SEND_BATCH_MAX_MESSAGES or size >= SEND_BATCH_MAX_BYTES:
                self.release_sends()
        if self._sends:
            self.schedule_flush()

    def release_sends(self) -> None:
        """
        Submit this turn's sends: one SendBatch, or a Send for a message
        alone (or, the session having been recreated on an older router
        meanwhile, a Send each).
        """
        sends = self._sends
        if not sends:
            return
        segments = self._send_segments
        self._sends, self._send_segments, self._send_bytes = [], [], 0
        submit = self.machine.submit
        n = len(sends)
        if n > 1 and self.version >= f.BATCH_VERSION:
            submit(Command(SEND_BATCH, f.SendBatch, (sends,), SendOutcomes(n, segments),
                           count=n, unanswered=n))
            return
        ends = [start for start, _, _ in segments[1:]] + [n]
        for (start, target, index), end in zip(segments, ends):
            for i in range(end - start):
                submit(Command(SEND, f.Send, tuple(sends[start + i]),
                               SendOutcomes(1, [(0, target, index + i)])))

    def queue(self, command: Command) -> None:
        """
        No connection now: C{command} waits for the session to be resumed.
        """
        self.log.waiting.extend(self._in_transaction(command))

    def _in_transaction(self, command: Command) -> list[Command]:
        """
        C{command}, preceded by the current transaction's Begin when it is
        the transaction's first send or acknowledgement.
        """
        if not self.options.transacted or command.kind not in (SEND, SEND_BATCH, ACK):
            return [command]
        transaction = command.transaction = self.transaction
        if transaction.begun:
            return [command]
        transaction.begun = True
        return [Command(BEGIN, f.Begin, (), transaction=transaction), command]

    def request_end_of_transaction(self, commit: bool) -> Deferred:
        """
        C{commit()} or C{rollback()}: this turn's acknowledgements join
        the transaction, then it ends, both as machine inputs, so that they
        are taken in order after the sends the application made before,
        even from a callback the session fires while handling a frame (a
        delivery): those sends' inputs are still to be taken then.
        """
        if self.options.transacted and not self.finished:
            for command in self.take_acks():
                self.machine.submit(command)
        d = Deferred()
        self.machine.transaction_ended(commit, d)
        return d

    def end_transaction(self, commit: bool) -> Deferred:
        """
        The machine's C{transaction_ended}: end the current transaction
        and start the next.  A transaction with no work ends at once; one that is rollback-only
        is rolled back, and its commit fails with L{TransactionRolledBack}.
        """
        d = Deferred()
        if not self.options.transacted:
            d.errback(ClientError(NOT_TRANSACTED, "the client was not made with transacted=True"))
            return d
        if self.finished:
            d.errback(self.unusable())
            return d
        transaction, self.transaction = self.transaction, Transaction()
        refused = TransactionRolledBack(f.ROLLED_BACK, transaction.rollback_only) if (
            commit and transaction.rollback_only) else None
        if not transaction.begun:
            if refused is not None:
                d.errback(refused)
            else:
                d.callback(None)
            return d
        if commit and refused is None:
            self.machine.submit(Command(COMMIT, f.Commit, (), d, transaction=transaction))
            return d
        rolled_back = Deferred()
        if refused is not None:
            rolled_back.addBoth(lambda _: d.errback(refused))
        else:
            rolled_back.chainDeferred(d)
        self.machine.submit(Command(ROLLBACK, f.Rollback, (), rolled_back,
                                    transaction=transaction))
        return d

    def lose_transactions(self, written: list[Command], waiting: list[Command],
                          detail: str) -> tuple[list[Command], list[Command]]:
        """
        The session that held the transactions' work is gone: settle their
        commands.  A Commit written and not answered may have been carried
        out (L{TransactionOutcomeUnknown}), and so may its sends
        (L{UnblockedError}); anything else of a transaction was not
        (L{TransactionRolledBack}; a Rollback simply succeeds).  The
        current transaction, if it had work (acknowledgements of this turn
        not yet taken included), can only roll back; this turn's
        acknowledgements and credit were for the lost session's deliveries
        and subscriptions, and are dropped.  Both happen before any
        command is settled: an application callback (a C{rollback()}, a
        C{commit()}) runs inside the settling, and must find the new
        state.

        @return: the other commands, written and waiting.
        """
        current = self.transaction
        if current.begun or (self.options.transacted and (self._acks or self._through)):
            current.begun = False
            current.rollback_only = f"the transaction's session was lost ({detail})"
        self._acks = []
        self._through = {}
        self._credit = {}
        committing = {command.transaction for command in written if command.kind == COMMIT}
        rest: tuple[list, list] = ([], [])
        for commands, others, was_written in ((written, rest[0], True),
                                              (waiting, rest[1], False)):
            for command in commands:
                if command.transaction is None:
                    others.append(command)
                    continue
                d = command.deferred
                if d is None:
                    continue
                if command.kind == COMMIT and was_written:
                    d.errback(TransactionOutcomeUnknown(detail))
                elif command.kind == ROLLBACK:
                    d.callback(None)
                elif command.transaction in committing:
                    d.errback(UnblockedError(detail))
                else:
                    d.errback(TransactionRolledBack(f.ROLLED_BACK, detail))
        return rest

    def refuse(self, command: Command) -> None:
        """
        The session is over (or closing): C{command} cannot be made.
        """
        if command.kind == UNSUBSCRIBE:
            command.deferred.callback(None)
            return
        error = self.unusable()
        if command.kind == SUBSCRIBE:
            self.subscriptions.pop(command.subscription.number, None)
            command.subscription._finish(error)
        if command.deferred is not None:
            command.deferred.errback(error)

    def drain(self) -> None:
        """
        Write the waiting commands that now fit.
        """
        while True:
            taken = self.log.next_to_write()
            if taken is None:
                return
            self.write(taken[1])

    def unsubscribe(self, subscription: Subscription) -> Deferred:
        """
        Cancel C{subscription}, after the acknowledgements made so far (so
        that they are not given back with the rest).
        """
        self._credit.pop(subscription, None)
        number = subscription.number
        d = Deferred()
        for command in self.take_acks():
            self.machine.submit(command)
        self.machine.submit(Command(UNSUBSCRIBE, f.Unsubscribe, (number,), d, subscription))
        return d

    def ack(self, subscription: Subscription, delivery_id: int, credit: int) -> None:
        self._acks.append(delivery_id)
        if credit:
            self._credit[subscription] = self._credit.get(subscription, 0) + credit
        self.schedule_flush()

    def ack_through(self, subscription: Subscription, delivery_id: int, covered: list[int],
                    credit: int) -> None:
        """
        A cumulative acknowledgement: the subscription's deliveries up to
        C{delivery_id} (C{covered}, those it held).  One AckThrough per
        subscription and turn on a version-4 session, else their ids in
        this turn's Ack.
        """
        if self.version >= f.BATCH_VERSION:
            self._through[subscription] = delivery_id
        else:
            self._acks.extend(covered)
        if credit:
            self._credit[subscription] = self._credit.get(subscription, 0) + credit
        self.schedule_flush()

    def schedule_flush(self) -> None:
        if self._flush_call is None:
            self._flush_call = self.clock.callLater(0, self._turn_ended)

    def _turn_ended(self) -> None:
        self._flush_call = None
        self.release_sends()
        self.machine.turn_ended()

    def take_acks(self) -> list[Command]:
        """
        This turn's acknowledgements as one Ack command, then the Credit
        commands they make room for.
        """
        commands = []
        if self._acks:
            acks, self._acks = self._acks, []
            commands.append(Command(ACK, f.Ack, (acks,)))
        if self._through:
            through, self._through = self._through, {}
            for subscription, delivery_id in through.items():
                commands.append(Command(ACK, f.AckThrough, (subscription.number, delivery_id)))
        if self._credit:
            credit, self._credit = self._credit, {}
            for subscription, n in credit.items():
                if subscription.active:
                    commands.append(Command(CREDIT, f.Credit, (subscription.number, n), None,
                                            subscription))
        return commands

    def flush(self) -> None:
        """
        The end of a turn on an open connection: write its Ack and Credit,
        then Received if what we hold grew.
        """
        for command in self.take_acks():
            self.submit(command)
        answered, delivered = self.log.answered_up_to(), self.delivered_up_to
        if answered > self._reported[0] or delivered > self._reported[1]:
            self._reported = (answered, delivered)
            self.write_frame(f.Received(answered, delivered))

    def flush_while_down(self) -> None:
        """
        The end of a turn without a connection: this turn's Ack and Credit
        wait, in order, for the session to be resumed.
        """
        for command in self.take_acks():
            self.queue(command)

    def ping(self, d: Deferred | None) -> None:
        n = next(self._ping_numbers)
        self._pings[n] = (d, self.clock.seconds())
        self.write_frame(f.Ping(n))

    def _keepalive_ping(self) -> None:
        self.ping(None)

    def write_frame(self, frame) -> None:
        self.write(encode(frame))

    def write(self, data: bytes) -> None:
        self.protocol.transport.write(data)
        self.traffic.sent()

    # -- ending -------------------------------------------------------------------

    def begin_close(self) -> None:
        """
        The application closes: acknowledgements of this turn first, then
        Close after every command already issued.
        """
        for command in self.take_acks():
            self.submit(command)
        for subscription in self.subscriptions.values():
            subscription.active = False
        self.submit(Command(CLOSE, f.Close, ()))

    def finish_close(self, why: ClientError) -> None:
        """
        The connection of a closing session ended.
        """
        if self._orderly:
            self.finish(None, "the client was closed")
        else:
            self.finish(self._refusal or why, "the connection was lost while closing")

    def gave_up(self, why: ClientError) -> None:
        """
        C{reconnect-attempts} were exhausted: DISCONNECT.
        """
        log.warn("client {client_id}: giving up on session {session} after "
                 "{attempts} reconnect attempts: {why}", client_id=self.client_id,
                 session=self.session_id, attempts=self.options.reconnect_attempts,
                 why=str(why))
        self.notify(DISCONNECT)
        self.finish(why, f"gave up reconnecting ({why})")

    def never_connected(self, why: ClientError) -> None:
        """
        C{initial-connect-attempts} were exhausted.
        """
        self.finish(why, "the client never connected")

    def closed_by_application(self) -> None:
        self.finish(None, "the client was closed")

    def forget(self, close_session: bool) -> None:
        """
        The client object was garbage-collected without close(): say where
        it was made, and close its connection (ending the session at once
        with Close when it is open, so the router does not keep it).
        """
        log.warn("client {client_id} was garbage-collected without close(); closing "
                 "its connection.  It was created at:\n{created_at}",
                 client_id=self.client_id, created_at=self.created_at)
        if self.protocol is not None:
            if close_session:
                self.write_frame(f.Close(self.log.last_id + 1))
            self.protocol.transport.loseConnection()
            self.protocol = None
        self.finish(None, "the client was garbage-collected")

    def finish(self, end: ClientError | None, detail: str) -> None:
        """
        The session is over: stop every timer, let the connection go, and
        settle everything still waiting so that nothing hangs.
        """
        self.release_sends()
        self.finished = True
        self.end = end
        self.detach()
        for call in (self._retry_call, self._flush_call):
            _cancel(call)
        self._retry_call = self._flush_call = None
        attempt, self._attempt, self._attempt_token = self._attempt, None, None
        if attempt is not None:
            attempt.cancel()
        error = UnblockedError(detail)
        written, waiting = self.lose_transactions(self.log.new_session(),
                                                  list(self.log.waiting), detail)
        unsettled = written + waiting
        self.log.waiting.clear()
        for command in unsettled:
            self._unblock(command, error)
        for subscription in self.subscriptions.values():
            subscription._finish(end)
        if self.opened is not None:
            d, self.opened, self._client_until_opened = self.opened, None, None
            if not d.called:
                d.errback(end or SessionError(CLOSED_CODE, detail))
        self._closing.end(end)

    def _unblock(self, command: Command, error: UnblockedError) -> None:
        if command.kind == UNSUBSCRIBE:
            # The session it was for is gone, and the subscription with it.
            self.subscriptions.pop(command.subscription.number, None)
            command.subscription._finish(None)
            command.deferred.callback(None)
            return
        if command.kind == SUBSCRIBE:
            self.subscriptions.pop(command.subscription.number, None)
            command.subscription._finish(error)
        if command.deferred is not None:
            command.deferred.errback(error)

    def unusable(self) -> ClientError:
        """
        The error of a call made once the session is over.
        """
        if self.end is not None:
            return SessionError(self.end.code, self.end.detail)
        return SessionError(CLOSED_CODE, "the client is closed")

    def forgotten(self) -> None:
        """
        The application's client object was collected (a weakref
        finalizer, which may run in the middle of anything): act on it at
        the next turn.
        """
        self.clock.callLater(0, self.machine.forgotten)

    def when_closed(self) -> Deferred:
        return self._closing.wait()

    def notify(self, event: str) -> None:
        for listener in list(self.listeners):
            try:
                listener(event)
            except Exception:
                log.failure("failure listener {listener!r} raised", listener=listener)

    def expired(self, frame: f.Expired) -> None:
        for listener in list(self.expiry_listeners):
            try:
                listener(frame.msg_id, frame.address, frame.router)
            except Exception:
                log.failure("expiry listener {listener!r} raised", listener=listener)


def _within_bytes(messages: list, size: int) -> tuple[list, int]:
    """
    The first of C{messages} (SendBatch items) that a SendBatch already
    holding C{size} bytes of bodies takes before it reaches
    L{SEND_BATCH_MAX_BYTES} (the one that reaches it included), and the
    size then.
    """
    for taken, message in enumerate(messages, 1):
        size += len(message[2])
        if size >= SEND_BATCH_MAX_BYTES:
            return messages[:taken], size
    return messages, size


def _epoch_of(frame: f.Opened) -> int:
    """
    The epoch C{frame} tells; 0 for a router older than the topology.
    """
    return frame.epoch if isinstance(frame, f.OpenedWithTopology) else 0


def _is_resubscription(command: Command) -> bool:
    """
    Whether C{command} is the client's own Subscribe of a recreation
    (rather than the application's).
    """
    return command.kind == SUBSCRIBE and command.deferred is None


def _cancel(call: IDelayedCall | None) -> None:
    if call is not None and call.active():
        call.cancel()


# -- the machine ---------------------------------------------------------------------

# States, named for what they wait for.
CONNECTING = "connecting"
OPENING = "opening"
WAITING_TO_RETRY = "waiting_to_retry"
CONNECTED = "connected"
WAITING_TO_RECONNECT = "waiting_to_reconnect"
RECONNECTING = "reconnecting"
REOPENING = "reopening"
CLOSING = "closing"
CLOSED = "closed"
DISCONNECTED = "disconnected"

_FIRST = (CONNECTING, OPENING, WAITING_TO_RETRY)
_DOWN = (WAITING_TO_RECONNECT, RECONNECTING, REOPENING)
_OPEN = (CONNECTED, CLOSING)
_OVER = (CLOSED, DISCONNECTED)


def _transitions() -> dict:
    """
    The transition table: (state, input) → (next state, behaviour), read
    top to bottom as the module docstring's table.  A behaviour is called
    with the core and the input's arguments once the machine is in the
    next state.
    """
    table: dict = {}

    def on(states, name: str, to, behaviour) -> None:
        for state in (states,) if isinstance(states, str) else states:
            assert (state, name) not in table, (state, name)
            table[state, name] = (to or state, behaviour)

    def nothing(core, *args) -> None:
        pass

    C = ClientCore  # noqa: N806

    # The first connection.
    on(CONNECTING, "connection_made", OPENING, lambda core, p: core.attach(p, resume=False))
    on(CONNECTING, "connect_failed", WAITING_TO_RETRY,
       lambda core, why: core.attempt_failed(why, first=True))
    on(OPENING, "got_opened", CONNECTED, C.opened_first)
    on(OPENING, "got_refusal", DISCONNECTED, C.refused)
    on(OPENING, "got_not_active", WAITING_TO_RETRY,
       lambda core, frame: core.turned_away(frame, first=True))
    on(OPENING, "connection_failed", WAITING_TO_RETRY,
       lambda core, why: core.attempt_failed(why, first=True))
    on(WAITING_TO_RETRY, "retry_due", CONNECTING, C.start_attempt)
    on(WAITING_TO_RETRY, "exhausted", DISCONNECTED, C.never_connected)

    # An open session (connected, or closing).
    on(_OPEN, "got_confirm", None, C.confirm)
    on(_OPEN, "got_error", None, C.error)
    on(_OPEN, "got_confirmed", None, C.confirmed)
    on(_OPEN, "got_deliver", None, C.deliver)
    on(_OPEN, "got_deliver_batch", None, C.deliver_batch)
    on(_OPEN, "got_processed", None, C.processed)
    on(_OPEN, "got_pong", None, C.got_pong)
    on(_OPEN, "got_expired", None, C.expired)
    on(_OPEN, "got_refusal", None, C.refusal)
    on(_OPEN, "got_not_active", None, C.refusal)
    on(_OPEN, "ping_requested", None, C.ping)
    on((OPENING, REOPENING) + _OPEN, "got_ping", None, C.pong)
    on((OPENING, REOPENING), "got_mechanisms", None, C.authenticate)
    on((OPENING, REOPENING), "got_challenge", None, C.respond)
    on((OPENING, REOPENING), "got_authenticated", None, C.check_router)
    on(CONNECTED, "submit", None, C.submit)
    on(CONNECTED, "turn_ended", None, C.flush)
    on(CONNECTED, "close_requested", CLOSING, C.begin_close)
    on(CONNECTED, "connection_failed", WAITING_TO_RECONNECT, C.connection_failed)

    # Reconnecting.
    on(WAITING_TO_RECONNECT, "retry_due", RECONNECTING, C.start_attempt)
    on(WAITING_TO_RECONNECT, "exhausted", DISCONNECTED, C.gave_up)
    on(RECONNECTING, "connection_made", REOPENING, lambda core, p: core.attach(p, resume=True))
    on(RECONNECTING, "connect_failed", WAITING_TO_RECONNECT,
       lambda core, why: core.attempt_failed(why, first=False))
    on(REOPENING, "got_opened", CONNECTED, C.reopened)
    on(REOPENING, "got_stale_opened", WAITING_TO_RECONNECT,
       lambda core, frame: core.refuse_stale(frame, first=False))
    for refusal in ("got_refusal", "got_not_active"):
        on(REOPENING, refusal, WAITING_TO_RECONNECT,
           lambda core, frame: core.turned_away(frame, first=False))
    on(REOPENING, "connection_failed", WAITING_TO_RECONNECT,
       lambda core, why: core.attempt_failed(why, first=False))
    on(_FIRST + _DOWN, "submit", None, C.queue)
    on(_DOWN, "turn_ended", None, C.flush_while_down)

    # Closing, and the end.
    on(CLOSING, "got_closed", None, lambda core, frame: core.closed_by_router())
    on(CLOSING, "connection_failed", CLOSED, C.finish_close)
    on(_FIRST + _DOWN, "close_requested", CLOSED, C.closed_by_application)
    on(CONNECTED, "forgotten", CLOSED, lambda core: core.forget(close_session=True))
    on(_FIRST + _DOWN + (CLOSING,), "forgotten", CLOSED,
       lambda core: core.forget(close_session=False))

    # What is moot, or refused, where.
    on((CLOSING,) + _OVER, "submit", None, C.refuse)
    on((CLOSING,) + _OVER, "close_requested", None, nothing)
    on(_OVER, "forgotten", None, nothing)
    on(_OVER, "ping_requested", None, lambda core, d: d.errback(core.unusable()))
    on(_FIRST + _DOWN, "ping_requested", None,
       lambda core, d: d.errback(SessionError(CONNECTION_LOST, "not connected now")))
    on(_FIRST + (CLOSING,) + _OVER, "turn_ended", None, nothing)
    on(_FIRST + _DOWN + _OPEN + _OVER, "transaction_ended", None,
       lambda core, commit, d: core.end_transaction(commit).chainDeferred(d))
    return table


class ClientMachine:
    """
    The session's state machine over a L{ClientCore}: an explicit table
    (L{_transitions}) rather than Automat, because every send and every
    answer is an input, and a dict lookup costs a fraction of Automat's
    transition.  The same rules hold: an input the current state has no
    transition for raises C{NoTransition} before any behaviour runs; the
    state changes before the behaviour runs; an input given while a
    behaviour runs (a callback sending again, a failure found while
    handling a frame) waits until that behaviour is done, in order.

    @ivar state: the current state.
    """

    _TABLE = _transitions()

    def __init__(self, core: ClientCore) -> None:
        self._core = core
        self.state = CONNECTING
        self._postponed: list | None = None

    def _fire(self, name: str, *args) -> None:
        if self._postponed is not None:
            self._postponed.append((name, args))
            return
        postponed = self._postponed = []
        try:
            self._run(name, args)
            while postponed:
                name, args = postponed.pop(0)
                self._run(name, args)
        finally:
            self._postponed = None

    def _run(self, name: str, args: tuple) -> None:
        try:
            self.state, behaviour = self._TABLE[self.state, name]
        except KeyError:
            raise NoTransition(state=self.state, symbol=name) from None
        behaviour(self._core, *args)

    def connection_made(self, protocol: RouterProtocol) -> None:
        self._fire("connection_made", protocol)

    def connect_failed(self, why: ClientError) -> None:
        self._fire("connect_failed", why)

    def got_opened(self, frame: f.Opened) -> None:
        self._fire("got_opened", frame)

    def got_refusal(self, frame: f.Error) -> None:
        self._fire("got_refusal", frame)

    def got_not_active(self, frame: f.Error) -> None:
        self._fire("got_not_active", frame)

    def got_stale_opened(self, frame: f.Opened) -> None:
        self._fire("got_stale_opened", frame)

    def got_mechanisms(self, frame: f.Mechanisms) -> None:
        self._fire("got_mechanisms", frame)

    def got_challenge(self, frame: f.Challenge) -> None:
        self._fire("got_challenge", frame)

    def got_authenticated(self, frame: f.Authenticated) -> None:
        self._fire("got_authenticated", frame)

    def got_confirm(self, frame: f.Confirm) -> None:
        self._fire("got_confirm", frame)

    def got_error(self, frame: f.Error) -> None:
        self._fire("got_error", frame)

    def got_confirmed(self, frame: f.Confirmed) -> None:
        self._fire("got_confirmed", frame)

    def got_deliver_batch(self, frame: f.DeliverBatch) -> None:
        self._fire("got_deliver_batch", frame)

    def got_deliver(self, frame: f.Deliver) -> None:
        self._fire("got_deliver", frame)

    def got_processed(self, frame: f.Processed) -> None:
        self._fire("got_processed", frame)

    def got_ping(self, frame: f.Ping) -> None:
        self._fire("got_ping", frame)

    def got_pong(self, frame: f.Pong) -> None:
        self._fire("got_pong", frame)

    def got_closed(self, frame: f.Closed) -> None:
        self._fire("got_closed", frame)

    def got_expired(self, frame: f.Expired) -> None:
        self._fire("got_expired", frame)

    def connection_failed(self, why: ClientError) -> None:
        self._fire("connection_failed", why)

    def retry_due(self) -> None:
        self._fire("retry_due")

    def exhausted(self, why: ClientError) -> None:
        self._fire("exhausted", why)

    # Commands keep the order the application made them in: this turn's
    # sends, which wait to travel together (ClientCore.send_later), go
    # before any other command, and before a transaction's end or Close.

    def submit(self, command: Command) -> None:
        if command.kind not in (SEND, SEND_BATCH):
            self._core.release_sends()
        self._fire("submit", command)

    def transaction_ended(self, commit: bool, deferred: Deferred) -> None:
        self._core.release_sends()
        self._fire("transaction_ended", commit, deferred)

    def ping_requested(self, deferred: Deferred) -> None:
        self._fire("ping_requested", deferred)

    def turn_ended(self) -> None:
        self._fire("turn_ended")

    def close_requested(self) -> None:
        self._core.release_sends()
        self._fire("close_requested")

    def forgotten(self) -> None:
        self._fire("forgotten")
