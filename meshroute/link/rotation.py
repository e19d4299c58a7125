"""
Several endpoints for one peer, tried in turn (Artemis' static connector
list): the rule shared by routing connectors and clients.

An I{attempt} is one connection through one endpoint; a I{round} is one
attempt at each endpoint, in list order, going on from the endpoint after
the one last used.  The attempts of a round follow each other at once, and
the L{RetrySchedule}'s delay comes between rounds, so C{reconnect-attempts}
and C{initial-connect-attempts} count rounds.  This is what Artemis does
with a static list: its C{ServerLocatorImpl.StaticConnector} tries every
connector, then waits C{retry-interval}; its reconnection loop
(C{ClientSessionFactoryImpl.getConnectionWithRetry}) counts one attempt
for trying the live connector and then its backup, and only then applies
the multiplier.  With one endpoint a round is one attempt, exactly the
rule of a single endpoint.

A connection that worked and then failed counts as the first attempt of a
new round, at its endpoint: the next attempt is the next endpoint, at
once, which is what a pair wants when its active instance dies.
"""

from collections.abc import Sequence

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IStreamClientEndpoint
from zope.interface import implementer

from meshroute.link.retry import RetrySchedule


@implementer(IStreamClientEndpoint)
class EndpointRotation:
    """
    An endpoint that connects through each of several endpoints in turn.

    @ivar current: the description of the endpoint the latest attempt used
        (before any attempt, the first one's).
    """

    def __init__(self, endpoints: Sequence[tuple[str, IStreamClientEndpoint]]) -> None:
        """
        @param endpoints: (description, endpoint) pairs, in the order to
            try them; the description (the endpoint string as configured)
            is what logs and the admin API show.
        @raise ValueError: C{endpoints} is empty.
        """
        if not endpoints:
            raise ValueError("at least one endpoint is needed")
        self._endpoints = tuple(endpoints)
        self._next = 0
        self._tried = 0
        self.current = self._endpoints[0][0]

    @property
    def descriptions(self) -> tuple[str, ...]:
        "Every endpoint's description, in order."
        return tuple(description for description, _ in self._endpoints)

    @property
    def upcoming(self) -> str:
        "The description of the endpoint the next attempt will use."
        return self._endpoints[self._next][0]

    def connect(self, protocolFactory) -> Deferred:  # noqa: N803 (IStreamClientEndpoint)
        """
        One attempt, through the next endpoint in turn.
        """
        description, endpoint = self._endpoints[self._next]
        self.current = description
        self._next = (self._next + 1) % len(self._endpoints)
        return endpoint.connect(protocolFactory)

    def delay_after_failure(self, schedule: RetrySchedule) -> float | None:
        """
        The latest attempt failed: how long to wait before the next one.

        @return: 0 while the round has endpoints left to try; at the end of
            a round, C{schedule}'s next delay, or None when its attempts
            are exhausted.
        """
        self._tried += 1
        if self._tried < len(self._endpoints):
            return 0.0
        self._tried = 0
        return schedule.next_delay()

    def start_round(self) -> None:
        """
        A connection worked (or the service starts again): the next
        failure is the first attempt of a new round.
        """
        self._tried = 0
