"""
A served session between two connections (docs/client-protocol.md,
"Sessions that survive failures"): how it waits for its client, and what
it gives the client that resumes it.

 - B{Waiting} (Diffusion's client reconnection): a session whose
   connection was lost without C{Close} waits C{[clients.reconnect]
   keep-alive} for its client, then expires.  Meanwhile its deliveries
   wait in its own queue (L{meshroute.sessions.own_queue}, at the larger
   bound, C{max-depth}), and the expiry notices of the messages it sent
   (C{Expired}, version 6) wait here: at most C{max-depth}, the oldest
   dropped first.  A session that stopped being resumable does not wait.
 - B{Resuming} (Artemis' session reattachment): the new connection gets
   C{Opened(reattached=true)} with the last command id received, then
   the answers its client does not hold
   (L{meshroute.sessions.answers}), the deliveries it did not receive,
   from the recovery buffer and the own queue, less those that expired
   meanwhile (L{meshroute.sessions.deliveries}), and the notices held;
   deliveries sent before that cannot be sent again go back to their
   queues, flagged redelivered.  Then the session carries on.
"""

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from twisted.internet.interfaces import IDelayedCall

from meshroute.sessions import session_records
from meshroute.wire import client_frames as f


@dataclass(eq=False)
class Reattachment:
    """
    When one served session's client went away, the keep-alive that ends
    its wait, the notices that wait for it, and the resume.

    @ivar session: the L{meshroute.sessions.served.ServedSession} whose
        client is away: its clock, settings and events, and the
        collaborators that hold what a resume re-sends.
    @ivar since: when the connection was lost (clock seconds), or None
        while the session has one.
    @ivar notices: the C{Expired} notices held for the client.
    """

    session: object = field(repr=False)
    since: float | None = None
    notices: deque = field(default_factory=deque)
    _call: IDelayedCall | None = None

    # -- waiting ----------------------------------------------------------------

    def wait(self, reason: str, expired: Callable[[], None]) -> None:
        """
        The session's connection is gone (for C{reason}), without Close:
        call C{expired} once keep-alive has passed, or at once if the
        session cannot be resumed.
        """
        session = self.session
        self.since = session.clock.seconds()
        keep_alive_ms = session.settings.keep_alive_ms
        session_records.disconnected(session, reason, keep_alive_ms)
        if not session.resumable:
            expired()
            return
        session.own_queue.disconnected()
        self._call = session.clock.callLater(keep_alive_ms / 1000, expired)

    def hold(self, notice: f.Expired) -> None:
        """
        Keep C{notice} for the client, within C{max-depth}.
        """
        notices = self.notices
        if len(notices) >= self.session.settings.max_depth:
            notices.popleft()
        notices.append(notice)

    def cancel(self) -> None:
        "Nobody waits any more (the client is back, or the session ended)."
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None

    def describe(self) -> tuple[float | None, float | None]:
        """
        For the admin API: how long the client has been away, and how
        long until the session expires (seconds; None while connected).
        """
        if self.since is None:
            return None, None
        away = self.session.clock.seconds() - self.since
        return away, max(0.0, self.session.settings.keep_alive_ms / 1000 - away)

    # -- resuming ---------------------------------------------------------------

    def resume(self, connection, frame: f.Open) -> None:
        """
        The session is attached to C{connection}, whose C{frame} resumed
        it: Opened, the held answers and deliveries the client lacks, then
        carry on.
        """
        session = self.session
        self.cancel()
        away, self.since = session.clock.seconds() - self.since, None
        session.write(connection.opened(session.session_id, session.engine.name,
                                        session.ttl_ms, True, session.answers.last_command_id))
        # 1. The answers the client does not hold.
        answers_resent = session.answers.resend(frame.answered_up_to)
        # 2. The deliveries it did not receive: from the recovery buffer,
        # then what queued while disconnected; and the expiry notices.
        deliveries_resent, lost = session.deliveries.resend(frame.delivered_up_to)
        notices, self.notices = self.notices, deque()
        if connection.version >= f.EXPIRY_VERSION:
            for notice in notices:
                session.write(notice)
        # 3. What queued while disconnected, as the transport takes it;
        # then carry on.
        session.own_queue.flush()
        requeued = session.deliveries.requeue(lost)
        session.sends.reattached(connection)
        session.answers.restart_processed()
        session_records.reattached(session, answers_resent, deliveries_resent, requeued, away)
