"""
Deliveries a client's protocol acknowledges once they are written, not
when the client says so: STOMP's C{ack:auto} subscriptions, MQTT's QoS 0
deliveries.  The deliveries written in one reactor turn are acknowledged
together at its end, one C{Ack} per subscription, outside any
transaction the session holds (the client never decided them), and the
credit they spent is renewed, so the subscription keeps flowing.
"""

from dataclasses import dataclass, field

from twisted.internet.interfaces import IDelayedCall

from meshroute.wire import client_frames as f


@dataclass(eq=False)
class WrittenAcks:
    """
    The deliveries of this turn to acknowledge as written, for one
    connection.

    @ivar connection: the connection's core (a
        L{meshroute.sessions.connection_core.ConnectionCore}): its clock, its
        session now, and the numbering of the commands its adapter gives
        the session (C{next_command}).
    """

    connection: object = field(repr=False)
    _due: dict = field(default_factory=dict)
    _call: IDelayedCall | None = None

    def written(self, subscription: int, delivery_id: int) -> None:
        """
        Delivery C{delivery_id} of subscription number C{subscription} was
        written: acknowledge it at the end of the turn.
        """
        self._due.setdefault(subscription, []).append(delivery_id)
        if self._call is None:
            self._call = self.connection.clock.callLater(0, self._acknowledge)

    def _acknowledge(self) -> None:
        self._call = None
        due, self._due = self._due, {}
        connection = self.connection
        for number, delivery_ids in due.items():
            session = connection.session
            if session is None:
                return
            session.take_ack_at_once(f.Ack(connection.next_command(), delivery_ids))
            if connection.session is None:
                return
            session.take_credit(f.Credit(connection.next_command(), number, len(delivery_ids)))

    def stop(self) -> None:
        """
        The connection writes nothing more: what was written and not yet
        acknowledged goes back to its queue with the session's other
        unacknowledged deliveries.
        """
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None
        self._due = {}
