"""
The client's side of one session, across connections: a state machine
(L{ClientMachine}, an explicit transition table) over a
L{meshroute.client.core.ClientCore} and its collaborators, in the shape of
Twisted's C{ClientService} (every timer comes from the injected clock),
speaking docs/client-protocol.md ("Sessions that survive failures").

The machine decides; the collaborators do, each one idea of the session:

 - C{connection} (L{meshroute.client.router_connection}): the connection
   to a router, one at a time: attempts over the endpoints, retries, the
   Open and its timeout, keepalive and pings, failures;
 - C{login} (L{meshroute.client.login}): authenticating (version 5);
 - C{commands} (L{meshroute.client.command_stream}): commands written in
   order within the confirmation window, and the router's answers;
 - C{sends} (L{meshroute.client.send_batching}): the sends of a turn,
   travelling together;
 - C{deliveries} (L{meshroute.client.deliveries}): subscriptions, their
   deliveries, acknowledgements and credit;
 - C{transactions} (L{meshroute.client.transactions}): a transacted
   client's transactions;
 - the core itself: the session's life as a whole: opened, reattached or
   recreated after a failure, closed or given up on.

States are named for what they wait for, inputs (L{ClientInputs}) for
what happened; a frame or call the current state has no transition for
raises C{NoTransition} before any behaviour runs (a frame then breaks the
connection as a protocol error).  Reading the table top to bottom::

    state                 input                       next                  what it does
    ────────────────────  ──────────────────────────  ────────────────────  ─────────────────────────────────────
    connecting            connection_made             opening               Open(new session)
                          connect_failed              waiting_to_retry      next initial-connect delay (or exhausted)
    opening               got_mechanisms/challenge/   opening               authenticate (version 5)
                            authenticated
                          got_opened                  connected             fire connect()'s Deferred
                          got_refusal                 disconnected          connect() fails with the router's code
                          got_not_active              waiting_to_retry      the next endpoint (or the next delay)
                          connection_failed/closed    waiting_to_retry      next initial-connect delay (or exhausted)
    waiting_to_retry      retry_due                   connecting            connect again
                          exhausted                   disconnected          connect() fails
    connected             got_confirm/got_error/…     connected             answers, deliveries, Processed, pings
                          submit                      connected             write, or queue when the window is full
                          connection_failed           waiting_to_reconnect  next reconnect delay (or exhausted)
                          connection_closed           waiting_to_reconnect  the next endpoint at once (or exhausted)
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
                            connection_failed/closed
    waiting_to_reconnect, submit, turn_ended          (same)                queue the command, this turn's acks
      reconnecting, reopening
    closing               got_closed                  closing               close the connection
                          connection_failed/closed    closed                close() fires
    the first three and   close_requested             closed                calls in progress unblocked
      the down three
    all but closed and    forgotten                   closed                warn where the client was made;
      disconnected                                                          Close if connected
    closing, closed,      submit                      (same)                the call fails (SessionError)
      disconnected
    every state           transaction_ended           (same)                commit/rollback (two-phase ones too),
                                                                            in order after the sends before it

Every failure of an established connection (closed, silent past
C{client-failure-check-period}, broken by a protocol error, refused by the
router) leads to C{waiting_to_reconnect}; the connection itself is let go
at once, so a late C{connectionLost} of it is ignored.  Only a connection
closed under the client (C{connection_closed}: EOF or reset, the router's
process killed) is followed by an attempt at once, at the next endpoint
(L{meshroute.client.router_connection.RouterConnection.closed} says when);
the others wait C{retry-interval}, as a failed attempt does.
"""

from functools import partial
from typing import Protocol

from automat import NoTransition
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime

from meshroute.client.commands import SEND, SEND_BATCH, Command
from meshroute.client.errors import ClientError
from meshroute.client.router_protocol import RouterProtocol
from meshroute.wire import client_frames as f


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

    def got_recovered(self, frame: f.Recovered) -> None:
        "The router answered a Recover with the prepared transactions (version 7)."

    def connection_failed(self, why: ClientError) -> None:
        """
        The connection in use failed: silent for the failure check period,
        broken by a protocol error, or Open timed out.
        """

    def connection_closed(self, why: ClientError) -> None:
        """
        The connection in use was closed (EOF or reset): by the router,
        having said why or not, or by the network, or with the router's
        process.
        """

    def retry_due(self) -> None:
        "The wait before the next connection attempt is over."

    def exhausted(self, why: ClientError) -> None:
        "No attempt is left: give up."

    def submit(self, command: Command) -> None:
        "The application (or the client itself) issues a command."

    def transaction_ended(self, ending: str, deferred: Deferred, xid) -> None:
        """
        The application commits, rolls back, prepares, or decides a
        two-phase transaction (C{ending}, of
        L{meshroute.client.transactions.ENDINGS}; C{xid} the one it
        named, or None); C{deferred} fires with the outcome.  An input
        like C{submit}, so that it is taken after the sends the
        application made before it, also from a callback the session
        fires while it handles a frame.
        """

    def ping_requested(self, deferred: Deferred) -> None:
        "The application asks for a round trip."

    def turn_ended(self) -> None:
        "The end of a reactor turn: write its sends, acks, credit and Received."

    def close_requested(self) -> None:
        "The application closes the client."

    def forgotten(self) -> None:
        "The application dropped the client without closing it."


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


def _nothing(*args) -> None:
    "The behaviour of an input that is moot in its state."


def transitions(core) -> dict:
    """
    The transition table over C{core}: (state, input) → (next state,
    behaviour), read top to bottom as the module docstring's table.  A
    behaviour is a method of the core or of one of its collaborators,
    called with the input's arguments once the machine is in the next
    state.
    """
    connection, login, commands = core.connection, core.login, core.commands
    deliveries = core.deliveries
    table: dict = {}

    def on(states, names, to, behaviour) -> None:
        for state in (states,) if isinstance(states, str) else states:
            for name in (names,) if isinstance(names, str) else names:
                assert (state, name) not in table, (state, name)
                table[state, name] = (to or state, behaviour)

    # The first connection.
    on(CONNECTING, "connection_made", OPENING, core.open_session)
    on(CONNECTING, "connect_failed", WAITING_TO_RETRY,
       partial(connection.attempt_failed, first=True))
    on(OPENING, "got_opened", CONNECTED, core.opened_first)
    on(OPENING, "got_refusal", DISCONNECTED, core.refused)
    on(OPENING, "got_not_active", WAITING_TO_RETRY, partial(connection.turned_away, first=True))
    on(OPENING, ("connection_failed", "connection_closed"), WAITING_TO_RETRY,
       partial(connection.attempt_failed, first=True))
    on(WAITING_TO_RETRY, "retry_due", CONNECTING, connection.start_attempt)
    on(WAITING_TO_RETRY, "exhausted", DISCONNECTED, core.never_connected)

    # An open session (connected, or closing).
    on(_OPEN, "got_confirm", None, commands.confirm)
    on(_OPEN, "got_error", None, commands.error)
    on(_OPEN, "got_confirmed", None, commands.confirmed)
    on(_OPEN, "got_deliver", None, deliveries.deliver)
    on(_OPEN, "got_deliver_batch", None, deliveries.deliver_batch)
    on(_OPEN, "got_processed", None, commands.processed)
    on(_OPEN, "got_pong", None, connection.pong_received)
    on(_OPEN, "got_expired", None, core.expired)
    on(_OPEN, "got_recovered", None, commands.recovered)
    on(_OPEN, "got_refusal", None, connection.router_closing)
    on(_OPEN, "got_not_active", None, connection.router_closing)
    on(_OPEN, "ping_requested", None, connection.ping)
    on((OPENING, REOPENING) + _OPEN, "got_ping", None, connection.answer_ping)
    on((OPENING, REOPENING), "got_mechanisms", None, login.authenticate)
    on((OPENING, REOPENING), "got_challenge", None, login.respond)
    on((OPENING, REOPENING), "got_authenticated", None, login.check_router)
    on(CONNECTED, "submit", None, commands.submit)
    on(CONNECTED, "turn_ended", None, commands.flush)
    on(CONNECTED, "close_requested", CLOSING, core.begin_close)
    on(CONNECTED, "connection_failed", WAITING_TO_RECONNECT, connection.failed)
    on(CONNECTED, "connection_closed", WAITING_TO_RECONNECT, connection.closed)

    # Reconnecting.
    on(WAITING_TO_RECONNECT, "retry_due", RECONNECTING, connection.start_attempt)
    on(WAITING_TO_RECONNECT, "exhausted", DISCONNECTED, core.gave_up)
    on(RECONNECTING, "connection_made", REOPENING, core.resume_session)
    on(RECONNECTING, "connect_failed", WAITING_TO_RECONNECT,
       partial(connection.attempt_failed, first=False))
    on(REOPENING, "got_opened", CONNECTED, core.reopened)
    on(REOPENING, "got_stale_opened", WAITING_TO_RECONNECT,
       partial(connection.refuse_stale, first=False))
    on(REOPENING, "got_refusal", WAITING_TO_RECONNECT,
       partial(connection.turned_away, first=False))
    on(REOPENING, "got_not_active", WAITING_TO_RECONNECT,
       partial(connection.turned_away, first=False))
    on(REOPENING, ("connection_failed", "connection_closed"), WAITING_TO_RECONNECT,
       partial(connection.attempt_failed, first=False))
    on(_FIRST + _DOWN, "submit", None, commands.queue)
    on(_DOWN, "turn_ended", None, commands.flush_while_down)

    # Closing, and the end.
    on(CLOSING, "got_closed", None, connection.closed_by_router)
    on(CLOSING, ("connection_failed", "connection_closed"), CLOSED, core.finish_close)
    on(_FIRST + _DOWN, "close_requested", CLOSED, core.closed_by_application)
    on(CONNECTED, "forgotten", CLOSED, partial(core.forget, close_session=True))
    on(_FIRST + _DOWN + (CLOSING,), "forgotten", CLOSED,
       partial(core.forget, close_session=False))

    # What is moot, or refused, where.
    on((CLOSING,) + _OVER, "submit", None, core.refuse)
    on((CLOSING,) + _OVER, "close_requested", None, _nothing)
    on(_OVER, "forgotten", None, _nothing)
    on(_OVER, "ping_requested", None, core.refuse_ping)
    on(_FIRST + _DOWN, "ping_requested", None, connection.ping_while_down)
    on(_FIRST + (CLOSING,) + _OVER, "turn_ended", None, _nothing)
    on(_FIRST + _DOWN + _OPEN + _OVER, "transaction_ended", None, core.end_transaction)
    return table


class EndOfTurn:
    """
    The machine's C{turn_ended} input, once at the end of each reactor turn
    in which something asked for it: sends gathered, acknowledgements or
    credit to write, a C{Received} to report.  Asking again in the same
    turn costs nothing.
    """

    def __init__(self, clock: IReactorTime, machine: ClientInputs) -> None:
        self._clock = clock
        self._machine = machine
        self._call: IDelayedCall | None = None

    def schedule(self) -> None:
        if self._call is None:
            self._call = self._clock.callLater(0, self._due)

    def cancel(self) -> None:
        """
        The session is over: no turn ends for it any more.
        """
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None

    def _due(self) -> None:
        self._call = None
        self._machine.turn_ended()


class ClientMachine:
    """
    The session's state machine: an explicit table (L{transitions}) rather
    than Automat, because every send and every answer is an input, and a
    dict lookup costs a fraction of Automat's transition.  The same rules
    hold: an input the current state has no transition for raises
    C{NoTransition} before any behaviour runs; the state changes before
    the behaviour runs; an input given while a behaviour runs (a callback
    sending again, a failure found while handling a frame) waits until
    that behaviour is done, in order.

    The machine is made before the collaborators that feed it inputs, and
    L{bind} hands it their behaviours.

    @ivar state: the current state.
    """

    def __init__(self) -> None:
        self.state = CONNECTING
        self._table: dict = {}
        self._release_sends = _nothing
        self._postponed: list | None = None

    def bind(self, core) -> None:
        """
        Take the behaviours of the transition table (L{transitions}) from
        C{core} and its collaborators.
        """
        self._table = transitions(core)
        self._release_sends = core.sends.release

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
            self.state, behaviour = self._table[self.state, name]
        except KeyError:
            raise NoTransition(state=self.state, symbol=name) from None
        behaviour(*args)

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

    def got_recovered(self, frame: f.Recovered) -> None:
        self._fire("got_recovered", frame)

    def connection_failed(self, why: ClientError) -> None:
        self._fire("connection_failed", why)

    def connection_closed(self, why: ClientError) -> None:
        self._fire("connection_closed", why)

    def retry_due(self) -> None:
        self._fire("retry_due")

    def exhausted(self, why: ClientError) -> None:
        self._fire("exhausted", why)

    # Commands keep the order the application made them in: this turn's
    # sends, which wait to travel together (SendBatcher), go before any
    # other command, and before a transaction's end, the end of the turn
    # or Close.

    def submit(self, command: Command) -> None:
        if command.kind not in (SEND, SEND_BATCH):
            self._release_sends()
        self._fire("submit", command)

    def transaction_ended(self, ending: str, deferred: Deferred, xid=None) -> None:
        self._release_sends()
        self._fire("transaction_ended", ending, deferred, xid)

    def ping_requested(self, deferred: Deferred) -> None:
        self._fire("ping_requested", deferred)

    def turn_ended(self) -> None:
        self._release_sends()
        self._fire("turn_ended")

    def close_requested(self) -> None:
        self._release_sends()
        self._fire("close_requested")

    def forgotten(self) -> None:
        self._fire("forgotten")
