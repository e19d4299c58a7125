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

A connection that worked (a link in delivery, a session opened) and then
failed ends a round of its own: the schedule's delay comes first, as with
one endpoint, and the next round starts at the endpoint after the one that
failed, which is the other instance when a pair's active one dies.  So
C{reconnect-attempts} rounds follow the failure, and with
C{reconnect-attempts = 0} there is no failover at all, as in Artemis.
A client's connection closed under it (EOF or reset) starts that round at
once instead (C{at_once}, L{RetrySchedule.retry_at_once}): the failover
"straight away" of Artemis' client; C{retry-interval} comes before the
round after it.
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
        self._used: int | None = None
        self._tried = 0
        self._connected = False
        self.current = self._endpoints[0][0]

    @property
    def descriptions(self) -> tuple[str, ...]:
        "Every endpoint's description, in order."
        return tuple(description for description, _ in self._endpoints)

    @property
    def in_round(self) -> bool:
        """
        Whether the latest failure left endpoints of its round to try.
        """
        return self._tried > 0

    @property
    def upcoming(self) -> str:
        "The description of the endpoint the next attempt will use."
        return self._endpoints[self._next][0]

    def add(self, description: str, endpoint: IStreamClientEndpoint) -> None:
        """
        Try C{endpoint} too, after every endpoint there is (a client told
        of its router's pair by the router).  The round in progress, if
        any, takes it in.
        """
        self._endpoints += ((description, endpoint),)
        if self._used is not None:
            self._next = (self._used + 1) % len(self._endpoints)

    def connect(self, protocolFactory) -> Deferred:  # noqa: N803 (IStreamClientEndpoint)
        """
        One attempt, through the next endpoint in turn.
        """
        description, endpoint = self._endpoints[self._next]
        self.current = description
        self._used = self._next
        self._next = (self._next + 1) % len(self._endpoints)
        return endpoint.connect(protocolFactory)

    def delay_after_failure(self, schedule: RetrySchedule, *,
                            at_once: bool = False) -> float | None:
        """
        The latest attempt, or the connection that worked, failed: how long
        to wait before the next attempt.

        @param at_once: the connection that worked was closed under its
            user, who fails over straight away: the round it ends is
            followed by the next one at once (moot after a failed attempt).
        @return: 0 while the round has endpoints left to try; at the end of
            a round (or when a connection that worked failed),
            C{schedule}'s next delay (0 for C{at_once}), or None when its
            attempts are exhausted.
        """
        if self._connected:
            self._connected = False
            self._tried = 0
            return schedule.retry_at_once() if at_once else schedule.next_delay()
        self._tried += 1
        if self._tried < len(self._endpoints):
            return 0.0
        self._tried = 0
        return schedule.next_delay()

    def connected(self) -> None:
        """
        The latest attempt made a connection that works (a link in
        delivery, a session opened): its failure will end a round.
        """
        self._connected = True
        self._tried = 0

    def restart(self) -> None:
        """
        The service starts (again): the next attempt begins a round.
        """
        self._connected = False
        self._tried = 0
