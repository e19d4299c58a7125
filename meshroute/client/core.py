"""
The core of one client session (L{ClientCore}): what the application's
L{meshroute.client.Client} holds, and what the session's machine
(L{meshroute.client.session_machine}) runs over.

The core owns the session's collaborators, each one idea (the connection,
the login, the command stream, the turn's sends, the deliveries, the
transactions), and does itself what spans them: the session's life as a
whole.  It opens the first session and hands the client to the
application; after a failure it resumes the session on a new connection,
replaying what the router did not receive (I{reattached}), or, when the
session is gone, makes a new one (I{recreated}): calls whose outcome is
unknown fail with L{UnblockedError}, subscriptions are made again (and a
durable topic subscription being forgotten is forgotten there), and
calls not yet written go out in the new session
(L{meshroute.client.lost_calls}).  When the session ends
(closed, refused, given up on, forgotten) it settles everything still
waiting, so that nothing hangs.
"""

from collections.abc import Callable

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime, IStreamClientEndpoint
from twisted.logger import Logger

from meshroute.client.command_stream import CommandStream
from meshroute.client.commands import CLOSE, COMMIT, ROLLBACK, Command
from meshroute.client.deliveries import Deliveries
from meshroute.client.ending import Ending
from meshroute.client.errors import CLOSED as CLOSED_CODE
from meshroute.client.errors import (
    NOT_TRANSACTED,
    ClientError,
    SessionError,
    UnblockedError,
    unsupported,
)
from meshroute.client.login import Login
from meshroute.client.lost_calls import carry_over, refuse, unblock
from meshroute.client.options import DISCONNECT, FAILOVER, ClientOptions
from meshroute.client.router_connection import RouterConnection
from meshroute.client.router_protocol import RouterProtocol
from meshroute.client.send_batching import SendBatcher
from meshroute.client.session_machine import ClientMachine, EndOfTurn
from meshroute.client.subscriptions import Subscription
from meshroute.client.transactions import TPC_COMMIT, TPC_ROLLBACK, Transactions
from meshroute.client.two_phase import PREPARE, RECOVER, Xid
from meshroute.link.rotation import EndpointRotation
from meshroute.wire import client_frames as f

log = Logger()

#: How a failover went, as L{ClientCore.last_failover} says.
REATTACHED = "reattached"
RECREATED = "recreated"


class ClientCore:
    """
    The state of one client session across its connections.  The machine
    decides; the core and its collaborators do.

    It never references the application's L{meshroute.client.Client}
    once that is handed over: an application that drops its client without
    closing it lets it be collected, and is warned (L{forgotten}).

    @ivar machine: the session's L{ClientMachine}.
    @ivar connection: the L{RouterConnection}.
    @ivar login: the L{Login} of each connection.
    @ivar commands: the L{CommandStream}.
    @ivar sends: the L{SendBatcher} of this turn's sends.
    @ivar deliveries: the L{Deliveries} of the subscriptions.
    @ivar transactions: the L{Transactions} of a transacted client.
    @ivar session_id: the session's id ("" before the first Opened).
    @ivar last_failover: L{REATTACHED} or L{RECREATED}: how the latest
        failure was survived (None if none was).
    @ivar end: why the session ended, if not by C{close()}.
    @ivar finished: the session is over.
    @ivar listeners: the failure listeners.
    @ivar expiry_listeners: the expiry listeners.
    """

    def __init__(self, clock: IReactorTime, endpoints: EndpointRotation, options: ClientOptions,
                 client_id: str, created_at: str,
                 endpoint_from_string: Callable[[str], IStreamClientEndpoint]) -> None:
        """
        @param endpoints: the endpoints to try, in turn.
        @param created_at: where the application made the client (a short
            stack summary), for the warning if it forgets it.
        @param endpoint_from_string: as L{RouterConnection}'s.
        """
        self.clock = clock
        self.options = options
        self.client_id = client_id
        self.created_at = created_at
        machine = self.machine = ClientMachine()
        end_of_turn = self._end_of_turn = EndOfTurn(clock, machine)
        self.connection = RouterConnection(clock, endpoints, options, client_id,
                                           endpoint_from_string, machine, end_of_turn)
        self.login = Login(options, self.connection, machine)
        self.deliveries = Deliveries(self.connection, machine, end_of_turn)
        self.transactions = Transactions(options.transacted, self.deliveries, machine)
        # A transacted client's acknowledgements belong to the transaction
        # that commit() ends: they never wait.
        ack_delay_s = 0.0 if options.transacted else options.ack_delay_ms / 1000
        self.commands = CommandStream(options.confirmation_window_size, self.connection,
                                      self.deliveries, self.transactions, end_of_turn, clock,
                                      ack_delay_s)
        self.sends = SendBatcher(self.connection, machine, end_of_turn)
        machine.bind(self)
        # A transacted client speaks only versions with transactions: a
        # router without them refuses it at Open (unsupported-version).
        self._versions = [v for v in f.SUPPORTED_VERSIONS
                          if not options.transacted or v >= f.TRANSACTIONS_VERSION]
        self._resuming = False
        self.session_id = ""
        self.last_failover: str | None = None
        self.end: ClientError | None = None
        self.finished = False
        self._closing = Ending()
        self.listeners: list[Callable[[str], object]] = []
        self.expiry_listeners: list[Callable[[str, str, str], object]] = []
        self._opened: Deferred | None = Deferred(lambda d: self.machine.close_requested())
        self._client_until_opened = None

    def connect(self, client) -> Deferred:
        """
        Make the first connection attempt.

        @param client: the application's L{meshroute.client.Client}.
        @return: Deferred firing with C{client} once the session is open;
            cancelling it gives up.
        """
        self._client_until_opened = client
        opened = self._opened
        self.connection.start_attempt()
        return opened

    # -- the session opened ---------------------------------------------------------

    def open_session(self, protocol: RouterProtocol) -> None:
        """
        The first connection is made: open a new session through it.
        """
        self.connection.attach(protocol, f.Open(self._versions, self.client_id, "",
                                                self.options.ttl_ms))

    def resume_session(self, protocol: RouterProtocol) -> None:
        """
        A new connection is made after a failure: ask the router to resume
        the session when we can (a window to replay from), else open a new
        one.
        """
        self._resuming = bool(self.session_id) and self.commands.log.window >= 0
        if self._resuming:
            answered, delivered = self.commands.resume_point()
            frame = f.Open(self._versions, self.client_id, self.session_id,
                           self.options.ttl_ms, answered, delivered)
        else:
            frame = f.Open(self._versions, self.client_id, "", self.options.ttl_ms)
        self.connection.attach(protocol, frame)

    def opened_first(self, frame: f.Opened) -> None:
        """
        The first session is open: hand the client to the application.
        """
        self.connection.opened(frame, first=True)
        self.session_id = frame.session_id
        d, client = self._opened, self._client_until_opened
        self._opened = self._client_until_opened = None
        d.callback(client)
        self.commands.drain()

    def refused(self, frame: f.Error) -> None:
        """
        The router refused the first Open.
        """
        self.finish(SessionError(frame.code, frame.detail), "the router refused the session")

    def reopened(self, frame: f.Opened) -> None:
        """
        A reconnection succeeded: carry on with the session if the router
        still had it, else recreate it.  Either way the listeners hear
        FAILOVER.
        """
        self.connection.opened(frame, first=False)
        if self._resuming and frame.reattached and frame.session_id == self.session_id:
            self.reattach(frame)
        else:
            self.recreate(frame)

    def reattach(self, frame: f.Opened) -> None:
        """
        The router still had the session: write again what it did not
        receive.  The application sees nothing but a delay.
        """
        replay = self.commands.to_replay(frame.last_command_id)
        if replay is None:
            return
        log.info("client {client_id}: session {session} reattached; replaying "
                 "{count} commands", client_id=self.client_id, session=self.session_id,
                 count=len(replay))
        for data in replay:
            self.connection.write(data)
        self.last_failover = REATTACHED
        self.commands.drain()
        self._end_of_turn.schedule()
        self.notify(FAILOVER)

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
        self.deliveries.new_generation()
        unknown, waiting = self.transactions.lose(
            *self.commands.take_unsettled(),
            f"the session was lost and recreated as {frame.session_id}")
        again, unblocked = carry_over(unknown, waiting, self.deliveries)
        self.commands.requeue(again)
        self.last_failover = RECREATED
        self.commands.drain()
        error = UnblockedError(f"the session was lost and recreated as {frame.session_id}")
        for command in unblocked:
            unblock(command, error, self.deliveries)
        self.notify(FAILOVER)

    # -- the application's calls ------------------------------------------------------

    def subscribe(self, make: Callable[..., Subscription]) -> Deferred:
        """
        L{meshroute.client.Client.subscribe} or C{subscribe_topic}, its
        arguments checked: C{make(deliveries, number)} is the subscription.
        """
        d = Deferred()
        if self.finished:
            d.errback(self.unusable())
            return d
        self.deliveries.subscribe(make, d)
        return d

    def request_end_of_transaction(self, ending: str, xid: Xid | None = None) -> Deferred:
        """
        C{commit()}, C{rollback()}, C{tpc_prepare()}, C{tpc_commit(xid)}
        or C{tpc_rollback(xid)} (C{ending}, one of L{ENDINGS}): this
        turn's acknowledgements join the transaction, then it ends, both
        as machine inputs, so that they are taken in order after the sends
        the application made before, even from a callback the session
        fires while handling a frame (a delivery): those sends' inputs are
        still to be taken then.
        """
        if not self.finished:
            self.transactions.take_acks()
        d = Deferred()
        self.machine.transaction_ended(ending, d, xid)
        return d

    def end_transaction(self, ending: str, d: Deferred, xid: Xid | None) -> None:
        """
        The machine's C{transaction_ended}: end a transaction
        (L{Transactions.end}), unless there is none to end.  Deciding a
        transaction by its xid needs no transacted client (a transaction
        manager's recovery may use any); two-phase commit needs a router
        of version 7.
        """
        if not self.options.transacted and (xid is None or ending not in (TPC_COMMIT,
                                                                           TPC_ROLLBACK)):
            d.errback(ClientError(NOT_TRANSACTED, "the client was not made with transacted=True"))
        elif self.finished:
            d.errback(self.unusable())
        elif ending in (COMMIT, ROLLBACK) or self._speaks_tpc(d):
            self.transactions.end(ending, d, xid)
        else:
            current = self.transactions.current.xid
            if current is not None and (ending == PREPARE or xid in (None, current)):
                # A router that cannot prepare or commit it by its xid:
                # it is rolled back (d failed with why).
                self.transactions.end(TPC_ROLLBACK, Deferred().addErrback(lambda _: None),
                                      current)

    def tpc_begin(self, xid: Xid) -> None:
        """
        L{meshroute.client.Client.tpc_begin}: the sends and
        acknowledgements made before it in this turn join the transaction
        they belong to first, so that it finds that transaction with work.

        @raise ClientError: C{not-transacted}, C{unsupported} (a router
            older than version 7), or the session is over.
        @raise TransactionStateError: see L{Transactions.tpc_begin}.
        """
        if not self.options.transacted:
            raise ClientError(NOT_TRANSACTED, "the client was not made with transacted=True")
        if self.finished:
            raise self.unusable()
        refusal = self._tpc_refusal()
        if refusal is not None:
            raise refusal
        self.sends.release()
        self.transactions.take_acks()
        self.transactions.tpc_begin(xid)

    def tpc_recover(self) -> Deferred:
        """
        L{meshroute.client.Client.tpc_recover}.
        """
        d = Deferred()
        if self._speaks_tpc(d):
            self.machine.submit(Command(RECOVER, f.Recover, (), d))
        return d

    def _speaks_tpc(self, d: Deferred) -> bool:
        """
        Whether two-phase commit may be asked of the router; if not, C{d}
        fails with why.
        """
        refusal = self._tpc_refusal()
        if refusal is not None:
            d.errback(refusal)
        return refusal is None

    def _tpc_refusal(self) -> ClientError | None:
        """
        Why two-phase commit cannot be asked of the router now (its
        version is known and older than 7), if it cannot.
        """
        return unsupported(self.connection.version, f.TPC_VERSION, "two-phase commit")

    def refuse(self, command: Command) -> None:
        """
        The session is over (or closing): C{command} cannot be made.
        """
        refuse(command, self.unusable(), self.deliveries)

    def refuse_ping(self, d: Deferred) -> None:
        d.errback(self.unusable())

    def unusable(self) -> ClientError:
        """
        The error of a call made once the session is over.
        """
        if self.end is not None:
            return SessionError(self.end.code, self.end.detail)
        return SessionError(CLOSED_CODE, "the client is closed")

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

    # -- ending -----------------------------------------------------------------------

    def begin_close(self) -> None:
        """
        The application closes: acknowledgements of this turn first, then
        Close after every command already issued.
        """
        for command in self.deliveries.take_acks():
            self.commands.submit(command)
        self.deliveries.stop_delivering()
        self.commands.submit(Command(CLOSE, f.Close, ()))

    def finish_close(self, why: ClientError) -> None:
        """
        The connection of a closing session ended.
        """
        if self.connection.orderly:
            self.finish(None, "the client was closed")
        else:
            self.finish(self.connection.refusal or why, "the connection was lost while closing")

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

    def forgotten(self) -> None:
        """
        The application's client object was collected (a weakref
        finalizer, which may run in the middle of anything): act on it at
        the next turn.
        """
        self.clock.callLater(0, self.machine.forgotten)

    def forget(self, close_session: bool) -> None:
        """
        The client object was garbage-collected without close(): say where
        it was made, and close its connection (ending the session at once
        with Close when it is open, so the router does not keep it).
        """
        log.warn("client {client_id} was garbage-collected without close(); closing "
                 "its connection.  It was created at:\n{created_at}",
                 client_id=self.client_id, created_at=self.created_at)
        self.connection.drop(f.Close(self.commands.log.last_id + 1) if close_session else None)
        self.finish(None, "the client was garbage-collected")

    def finish(self, end: ClientError | None, detail: str) -> None:
        """
        The session is over: stop every timer, let the connection go, and
        settle everything still waiting so that nothing hangs.
        """
        self.sends.stop()
        self.finished = True
        self.end = end
        self.connection.stop()
        self._end_of_turn.cancel()
        error = UnblockedError(detail)
        written, waiting = self.transactions.lose(*self.commands.take_unsettled(), detail)
        for command in written + waiting:
            unblock(command, error, self.deliveries)
        self.deliveries.end_all(end)
        if self._opened is not None:
            d, self._opened, self._client_until_opened = self._opened, None, None
            if not d.called:
                d.errback(end or SessionError(CLOSED_CODE, detail))
        self._closing.end(end)

    def when_closed(self) -> Deferred:
        return self._closing.wait()
