"""
A routing connector: keeps one outbound link up, reconnecting under the
Artemis retry parameters.

Reconnection is Twisted's C{ClientService}; the delays come from a
L{RetrySchedule} that counts failed *links*, not failed TCP connects.
The connector's endpoints (one, or a list: the two instances of a pair, a
router reachable at two addresses) are tried in turn by an
L{EndpointRotation}: the schedule's delay comes after each full round.
C{ClientService} alone counts a TCP connection as a success, and its
C{prepareConnection} hook cannot wait for our handshake: when the peer
closes a connection whose preparation is still pending, C{ClientService}
(Twisted 26.10) raises C{NoTransition} out of C{connectionLost}.  So the
handshake stays in our machine, and a link that reaches delivery resets
the schedule.
"""

from twisted.application.internet import ClientService
from twisted.application.service import Service
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from meshroute import events
from meshroute.link.context import RouterContext
from meshroute.link.link import ConnectorFactory
from meshroute.link.retry import RetrySchedule
from meshroute.link.rotation import EndpointRotation
from meshroute.link.settings import ConnectorSettings

log = Logger()


def _drop(event: dict) -> None:
    pass


class _ClientService(ClientService):
    """
    A C{ClientService} that does not log its own retries: its line names
    the endpoint object, not the endpoint string, and counts failed TCP
    connects, which a connection that fails its handshake resets, so it
    always says "retry 1".  L{ConnectorService} logs each retry instead.
    """

    _log = Logger(observer=_drop)


class ConnectorService(Service):
    """
    One C{[[routing.connector]]}: connect, and reconnect until stopped or
    until C{reconnect-attempts} retries in a row have failed.

    @ivar exhausted: True once it gave up.
    """

    def __init__(
        self,
        context: RouterContext,
        settings: ConnectorSettings,
        endpoints: EndpointRotation,
        schedule: RetrySchedule,
        clock: IReactorTime,
        side=None,
    ) -> None:
        """
        @param endpoints: the configured endpoints, tried in turn; each
            link records the one it used (logs, events, admin API).
        @param side: keep a vote connection up instead of a link (an
            HA instance to a witness, L{meshroute.ha.voters}), reporting
            to this L{VoteSide}, or a replication connection
            (L{meshroute.ha.follower}); reaching voting or replication
            counts as reaching delivery.
        """
        self.setName(f"connector:{settings.expected_peer}")
        self._endpoints = endpoints
        self._context = context
        self._peer = settings.expected_peer
        self._schedule = schedule
        self._clock = clock
        self.exhausted = False
        self._giving_up = None
        factory = ConnectorFactory(context, settings, on_delivery=self._delivered,
                                   endpoint=lambda: endpoints.current, side=side)
        self._client = _ClientService(
            endpoints, factory, retryPolicy=self._retry_delay, clock=clock
        )

    def startService(self) -> None:
        Service.startService(self)
        self.exhausted = False
        self._schedule.reset()
        self._endpoints.restart()
        self._client.startService()

    def _delivered(self) -> None:
        """
        A link reached delivery: the schedule starts over, and the link's
        death will end a round.
        """
        self._schedule.reset()
        self._endpoints.connected()

    def stopService(self):
        Service.stopService(self)
        # A stop that lands before a pending give-up is a stop, not an
        # exhaustion (and a restart must not be stopped by it).
        if self._giving_up is not None and self._giving_up.active():
            self._giving_up.cancel()
        self._giving_up = None
        return self._client.stopService()

    def _retry_delay(self, _tcp_failures: int) -> float:
        failed = self._endpoints.current
        delay = self._endpoints.delay_after_failure(self._schedule)
        if self._endpoints.in_round:
            log.info("connector to {peer} at {endpoint}: attempt failed; trying {next} now",
                     peer=self._peer, endpoint=failed, next=self._endpoints.upcoming)
            return delay
        if delay is not None and len(self._endpoints.descriptions) > 1:
            log.info("connector to {peer}: round {attempt} failed (last at {endpoint}); "
                     "retrying from {next} in {delay} s", peer=self._peer, endpoint=failed,
                     attempt=self._schedule.failures, next=self._endpoints.upcoming,
                     delay=delay)
            return delay
        if delay is not None:
            log.info("connector to {peer} at {endpoint}: attempt {attempt} failed; "
                     "retrying in {delay} s", peer=self._peer, endpoint=failed,
                     attempt=self._schedule.failures, delay=delay)
            return delay
        # Stop outside ClientService's own transition, which is in progress;
        # the retry it schedules is later than the give-up, which cancels it.
        self._giving_up = self._clock.callLater(0, self._give_up)
        return self._schedule.max_retry_interval_ms / 1000

    def _give_up(self) -> None:
        self._giving_up = None
        attempts = self._schedule.reconnect_attempts
        log.error(
            "connector to {peer}: reconnect-attempts ({attempts}) exhausted; "
            "giving up until the router restarts",
            peer=self._peer,
            attempts=attempts,
        )
        self._context.events.emit(events.CONNECTOR_EXHAUSTED, peer=self._peer,
                                  attempts=attempts)
        self.exhausted = True
        self._client.stopService()
