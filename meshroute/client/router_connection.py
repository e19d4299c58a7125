"""
The session's connection to a router, one at a time (L{RouterConnection}):
attempts over the client's endpoints, the waits between them, the Open
and its timeout, the keepalive, pings, and every way a connection fails,
each turned into an input of the session's machine
(L{meshroute.client.session_machine}).

The first connection retries under C{initial-connect-attempts}, later
ones under C{reconnect-attempts}, each with its own L{RetrySchedule}
(Artemis' rule, shared with the routing connectors).  The client's
endpoints (one, or several: the instances of a pair) are tried in turn by
an L{EndpointRotation}, also shared with the routing connectors: an
attempt at each endpoint is one round, the schedule's delay comes between
rounds, and both attempt counts count rounds.

An established connection that closes under the client (EOF or reset:
the router's process was killed) is followed by the first attempt at
once, at the next endpoint (the other instance of a pair), as Artemis'
client fails over "straight away" when the socket closes;
C{retry-interval} comes before the round after it
(L{RouterConnection.closed} says when not: a router that said why it
closed, or a connection that served for less than C{retry-interval}).
Every other failure (silence, a protocol error, Open timing out, an
attempt that did not connect or that the router refused) is followed by
C{retry-interval}, as before.

The instances of a high-availability pair (docs/ha.md, "Clients"): an
instance that is not the active one refuses Open with C{not-active}, and
the client tries the next endpoint as after a failed attempt (the first
connection too: unlike other refusals, this one is about the instance,
not the client).  A version-3 router's Opened (L{f.OpenedWithTopology})
names the pair's endpoints, which join the rotation after those the
client was given (L{RouterConnection.learn_topology}), and its epoch: the
client keeps the highest epoch it has seen, and refuses an instance that
answers with a lower one (a stale instance that still believes it is
active), closing that connection before writing anything there
(C{got_stale_opened}, decided by L{RouterConnection.stale}).  The session
the new active instance makes is a recreated one, as at any other router.
"""

import itertools
from collections.abc import Callable

from twisted.internet.defer import Deferred
from twisted.internet.endpoints import connectProtocol
from twisted.internet.interfaces import IDelayedCall, IReactorTime, IStreamClientEndpoint
from twisted.logger import Logger

from meshroute.client.errors import (
    CONNECTION_LOST,
    STALE_EPOCH,
    TIMEOUT,
    ClientError,
    SessionError,
    UnblockedError,
)
from meshroute.client.options import ClientOptions
from meshroute.client.router_protocol import RouterProtocol
from meshroute.client.session_machine import ClientInputs, EndOfTurn
from meshroute.client.traffic_timer import TrafficTimer
from meshroute.link.retry import RetrySchedule
from meshroute.link.rotation import EndpointRotation
from meshroute.wire import client_frames as f
from meshroute.wire.codec import encode
from meshroute.wire.transport import flush_now

log = Logger()


class RouterConnection:
    """
    The connection the session speaks through now, and the attempts that
    make the next one.

    @ivar machine: the session's machine, fed this connection's inputs.
    @ivar endpoints: the L{EndpointRotation} of the endpoints tried.
    @ivar protocol: the L{RouterProtocol} speaking for the session (None
        between connections): whatever another one delivers is ignored.
    @ivar traffic: the L{TrafficTimer} of the connection in use.
    @ivar router: the router's name (None before the first Opened).
    @ivar version: the protocol version of the latest Opened (0 before).
    @ivar ttl_ms: the connection TTL in force.
    @ivar epoch: the highest epoch a router of the pair told (0: none).
    @ivar refusal: why the router is closing the connection in use, when
        it said so (an Error with id 0 on an open session).
    @ivar orderly: the router finished the session the client closed.
    @ivar opened_at: when the router last answered Open (the clock's
        seconds; None before).
    """

    def __init__(self, clock: IReactorTime, endpoints: EndpointRotation, options: ClientOptions,
                 client_id: str, endpoint_from_string: Callable[[str], IStreamClientEndpoint],
                 machine: ClientInputs, end_of_turn: EndOfTurn) -> None:
        """
        @param endpoint_from_string: makes the endpoint of an endpoint
            string a router tells (its pair's instances).
        @param end_of_turn: asked for by the first write of a turn, whose
            end hands what the turn wrote to the kernel (L{flush}).
        """
        self._end_of_turn = end_of_turn
        self._clock = clock
        self.endpoints = endpoints
        self._options = options
        self._client_id = client_id
        self._endpoint_from_string = endpoint_from_string
        self.machine = machine
        self._initial = RetrySchedule(
            options.retry_interval_ms, options.retry_interval_multiplier,
            options.max_retry_interval_ms,
            -1 if options.initial_connect_attempts == -1 else options.initial_connect_attempts - 1,
        )
        self._reconnect = RetrySchedule(
            options.retry_interval_ms, options.retry_interval_multiplier,
            options.max_retry_interval_ms, options.reconnect_attempts,
        )
        self.protocol: RouterProtocol | None = None
        #: Something was written since the end of the last turn (or, before
        #: the session is open, since the connection was made).
        self.unflushed = False
        self.traffic = TrafficTimer(clock, self._keepalive_ping, self._silent)
        self._attempt: Deferred | None = None
        self._attempt_token: object = None
        self._retry_call: IDelayedCall | None = None
        self._open_timer: IDelayedCall | None = None
        self.router: str | None = None
        self.version = 0
        self.ttl_ms = options.ttl_ms
        self.epoch = 0
        self.refusal: ClientError | None = None
        self.orderly = False
        self.opened_at: float | None = None
        self._pings: dict[int, tuple[Deferred | None, float]] = {}
        self._ping_numbers = itertools.count(1)

    # -- attempts -----------------------------------------------------------------

    def start_attempt(self) -> None:
        """
        Connect once through the endpoint.
        """
        token = self._attempt_token = object()
        protocol = RouterProtocol(self, self._options.max_frame_size)

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

    def attach(self, protocol: RouterProtocol, open_frame: f.Open) -> None:
        """
        Speak through C{protocol}: send C{open_frame} and wait for the
        answer.
        """
        self.protocol = protocol
        self.refusal = None
        self.write_frame(open_frame)
        self._open_timer = self._clock.callLater(self._options.open_timeout_ms / 1000,
                                                 self._open_timed_out)

    def _open_timed_out(self) -> None:
        self._open_timer = None
        self.machine.connection_failed(SessionError(
            TIMEOUT, f"no answer to Open within {self._options.open_timeout_ms / 1000:g} s"))

    def opened(self, frame: f.Opened, first: bool) -> None:
        """
        The router answered Open: its terms are in force, and the attempts
        start over.
        """
        _cancel(self._open_timer)
        self._open_timer = None
        self.router = frame.router
        self.version = frame.version
        self.ttl_ms = frame.ttl_ms
        self.opened_at = self._clock.seconds()
        self.endpoints.connected()
        if isinstance(frame, f.OpenedWithTopology):
            self.learn_topology(frame)
        self.traffic.start(frame.ttl_ms, self._options.client_failure_check_period_ms)
        (self._initial if first else self._reconnect).reset()

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

    def attempt_failed(self, why: ClientError, first: bool, at_once: bool = False) -> None:
        """
        A connection attempt (or the connection) failed: wait for the next
        attempt, or give up when the schedule is exhausted.

        @param at_once: the connection that worked was closed under the
            client: the next attempt is made at once
            (L{EndpointRotation.delay_after_failure}).
        """
        self.detach()
        failed = self.endpoints.current
        delay = self.endpoints.delay_after_failure(self._initial if first else self._reconnect,
                                                   at_once=at_once)
        if delay is None:
            self.machine.exhausted(why)
            return
        log.info("client {client_id}: {why} (at {endpoint}); connecting to {next} "
                 "in {delay:g} s", client_id=self._client_id, why=str(why), endpoint=failed,
                 next=self.endpoints.upcoming, delay=delay)
        self._retry_call = self._clock.callLater(delay, self._retry_due)

    def _retry_due(self) -> None:
        self._retry_call = None
        self.machine.retry_due()

    def stop(self) -> None:
        """
        The session is over: let the connection go, and make no more
        attempts.
        """
        self.detach()
        _cancel(self._retry_call)
        self._retry_call = None
        attempt, self._attempt, self._attempt_token = self._attempt, None, None
        if attempt is not None:
            attempt.cancel()

    # -- failures -----------------------------------------------------------------

    def failed(self, why: ClientError, at_once: bool = False) -> None:
        """
        The established connection failed: the session waits to be
        resumed (or recreated).

        @param at_once: as L{attempt_failed}'s.
        """
        why = self.refusal or why
        log.warn("client {client_id}: connection to router {router} at {endpoint} failed: {why}",
                 client_id=self._client_id, router=self.router, endpoint=self.endpoints.current,
                 why=str(why))
        self.attempt_failed(why, first=False, at_once=at_once)

    def closed(self, why: ClientError) -> None:
        """
        The established connection was closed under the client (EOF or
        reset): fail over straight away, the first attempt at once, at the
        next endpoint, unless

         - the router said why it closes (L{router_closing}: a refusal on
           an open session, C{not-active} of an instance stepping down
           included): what it refuses may well be refused again, so the
           client waits C{retry-interval}, as it always did;
         - the connection served for less than C{retry-interval} since
           its Open was answered: a router that drops sessions as soon as
           it opens them (a bug, a listener out of buffers) is not
           hammered; so a client never connects more often than once per
           C{retry-interval} for this rule.
        """
        served = self._clock.seconds() - self.opened_at
        at_once = (self.refusal is None
                   and served >= self._options.retry_interval_ms / 1000)
        self.failed(why, at_once=at_once)

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
            f"(client-failure-check-period {self._options.client_failure_check_period_ms} ms)"))

    def turned_away(self, frame: f.Error, first: bool) -> None:
        """
        The router refused the Open, and a retry may do better: go on as
        after a failed attempt.
        """
        self.attempt_failed(SessionError(frame.code, frame.detail), first)

    def router_closing(self, frame: f.Error) -> None:
        """
        Error(0) on an open session: the router closes the connection
        next, and this is why.
        """
        self.refusal = SessionError(frame.code, frame.detail)

    def closed_by_router(self, frame: f.Closed) -> None:
        """
        The router finished the session the client closed: close the
        connection.
        """
        self.orderly = True
        self.protocol.transport.loseConnection()

    def drop(self, last_words: f.Close | None) -> None:
        """
        Close the connection in use, if any, now, after C{last_words}
        (if given): the application forgot the client.
        """
        if self.protocol is not None:
            if last_words is not None:
                self.write_frame(last_words)
            self.protocol.transport.loseConnection()
            self.protocol = None

    # -- a pair's instances ---------------------------------------------------------

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
                 "older than epoch {seen}; trying the next endpoint", client_id=self._client_id,
                 router=frame.router, endpoint=self.endpoints.current, epoch=epoch,
                 seen=self.epoch)
        self.attempt_failed(SessionError(
            STALE_EPOCH, f"router {frame.router} at {self.endpoints.current} serves epoch "
            f"{epoch}, older than epoch {self.epoch}"), first)

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
                endpoint = self._endpoint_from_string(description)
            except Exception as e:
                log.warn("client {client_id}: router {router} names the endpoint {endpoint!r} "
                         "of its pair, which cannot be used: {why}", client_id=self._client_id,
                         router=frame.router, endpoint=description, why=str(e))
                continue
            self.endpoints.add(description, endpoint)

    # -- pings and writing ----------------------------------------------------------

    def ping(self, d: Deferred | None) -> None:
        """
        Send a Ping; C{d} (if any) fires with the round trip's seconds.
        """
        n = next(self._ping_numbers)
        self._pings[n] = (d, self._clock.seconds())
        self.write_frame(f.Ping(n))

    def _keepalive_ping(self) -> None:
        self.ping(None)

    def ping_while_down(self, d: Deferred) -> None:
        """
        The application asks for a round trip while no connection is up.
        """
        d.errback(SessionError(CONNECTION_LOST, "not connected now"))

    def answer_ping(self, frame: f.Ping) -> None:
        self.write_frame(f.Pong(frame.n))

    def pong_received(self, frame: f.Pong) -> None:
        waiting = self._pings.pop(frame.n, None)
        if waiting is not None and waiting[0] is not None:
            d, sent_at = waiting
            d.callback(self._clock.seconds() - sent_at)

    def write_frame(self, frame) -> None:
        self.write(encode(frame))

    def write(self, data: bytes) -> None:
        self.protocol.transport.write(data)
        self.traffic.sent()
        if not self.unflushed:
            self.unflushed = True
            self._end_of_turn.schedule()

    def flush(self) -> None:
        """
        Hand what this turn wrote to the kernel now (L{flush_now}), at the
        end of the turn, rather than at the reactor's next poll.
        """
        if self.unflushed and self.protocol is not None:
            self.unflushed = False
            flush_now(self.protocol.transport)


def _epoch_of(frame: f.Opened) -> int:
    """
    The epoch C{frame} tells; 0 for a router older than the topology.
    """
    return frame.epoch if isinstance(frame, f.OpenedWithTopology) else 0


def _cancel(call: IDelayedCall | None) -> None:
    if call is not None and call.active():
        call.cancel()
