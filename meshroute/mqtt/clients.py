"""
The MQTT clients of one router, by client id (docs/mqtt.md, "Client
ids"): client ids are per router, shared by the MQTT listener's
endpoints (TCP, TLS, WebSocket), not across the mesh.

 - B{Takeover}: a connection whose CONNECT names a client id already
   connected takes it over; the first connection is closed (the
   specifications' rule), its session ended (L{MqttClients.claim}).
 - B{Session expiry}: a persistent session whose client went away ends
   (its durable subscriptions forgotten) after its session expiry
   interval (5.0; a 3.1.1 persistent session, and one of interval
   0xFFFFFFFF, never expires), unless the client comes back first.
 - B{Will delay}: a will whose delay interval (5.0) has not passed when
   the client comes back is not published.

The timers live here, not in a connection: they outlive it.  They are
not kept across a restart of the router (docs/mqtt.md says what that
means).
"""

from dataclasses import dataclass, field

from twisted.internet.defer import DeferredList, maybeDeferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

log = Logger()


@dataclass(eq=False)
class MqttClients:
    """
    The connected MQTT clients of one router, and the timers of those
    away.

    @ivar connected: client id → the connection core that has it.
    """

    clock: IReactorTime
    connected: dict = field(default_factory=dict)
    _expiries: dict = field(default_factory=dict)
    _wills: dict = field(default_factory=dict)

    def claim(self, client_id: str, connection):
        """
        C{connection} has C{client_id} now: the timers of its previous
        connection stop (its session did not expire, its will is not
        published).

        @return: the connection that had it, to be closed, or None.
        """
        for timers in (self._expiries, self._wills):
            call = timers.pop(client_id, None)
            if call is not None and call.active():
                call.cancel()
        previous = self.connected.get(client_id)
        self.connected[client_id] = connection
        return previous if previous is not connection else None

    def release(self, client_id: str, connection) -> bool:
        """
        C{connection} ended: whether it still had C{client_id} (else
        another connection took it over).
        """
        if self.connected.get(client_id) is not connection:
            return False
        del self.connected[client_id]
        return True

    def later(self, client_id: str, seconds: float, what: str, call) -> None:
        """
        Run C{call()} in C{seconds} unless C{client_id} is claimed first:
        C{what} is C{"expiry"} (its session's) or C{"will"} (its will's).
        """
        timers = self._expiries if what == "expiry" else self._wills

        def due() -> None:
            del timers[client_id]
            call()

        timers[client_id] = self.clock.callLater(seconds, due)

    def stop(self) -> None:
        """
        The router stops: no timer outlives it.
        """
        for timers in (self._expiries, self._wills):
            for call in timers.values():
                if call.active():
                    call.cancel()
            timers.clear()


def forget_durables(topics, client_id: str):
    """
    Forget every durable subscription of C{client_id} at the router
    (C{topics}: its L{meshroute.router.topic_subscriptions.TopicSubscriptions}):
    a Deferred firing once each is forgotten (or failed to be, logged).
    """
    names = [durable.name for durable in list(topics.durable.values())
             if durable.client_id == client_id]
    forgetting = [maybeDeferred(topics.forget, client_id, name) for name in names]
    for d in forgetting:
        d.addErrback(lambda failure: log.failure(
            "MQTT session of {client}: forgetting a subscription failed", failure,
            client=client_id))
    return DeferredList(forgetting)
