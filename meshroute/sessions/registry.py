"""
The served sessions of a router's client listeners, by id: what the
admin API lists (C{GET /api/v1/sessions}), what a native C{Open} naming a
session resumes, what C{max-sessions} counts (the native and STOMP
listeners share one registry), and where the engine's expiry notices find
the session that asked for them.
"""

from meshroute.sessions.served import DISCONNECTED, NATIVE, OPEN, ServedSession
from meshroute.wire import client_frames as f


class SessionRegistry:
    """
    The sessions of one client listener (or of the native and STOMP ones
    together), from their start to their end (closed or expired).
    """

    def __init__(self) -> None:
        self.sessions: dict[str, ServedSession] = {}
        self._by_notice_id: dict[str, ServedSession] = {}

    def add(self, session: ServedSession) -> None:
        self.sessions[session.session_id] = session
        self._by_notice_id[session.notice_id] = session

    def remove(self, session: ServedSession) -> None:
        if self.sessions.get(session.session_id) is session:
            del self.sessions[session.session_id]
        if self._by_notice_id.get(session.notice_id) is session:
            del self._by_notice_id[session.notice_id]

    def resumable(self, session_id: str) -> ServedSession | None:
        """
        The session C{session_id} if it can be resumed (open on another
        connection, or disconnected; a native one: STOMP has no resume).
        """
        session = self.sessions.get(session_id)
        if (session is not None and session.state in (OPEN, DISCONNECTED)
                and session.protocol == NATIVE):
            return session
        return None

    def describe(self) -> list[dict]:
        """
        C{GET /api/v1/sessions}.
        """
        return [session.describe() for session in self.sessions.values()]

    def expired_notice(self, notice_id: str, msg_id: str, address: str, router: str) -> bool:
        """
        Message C{msg_id} that the session of C{notice_id}
        (L{ServedSession.notice_id}) sent to C{address} expired at
        C{router}: tell the session, if it is here and not ended.  Returns
        whether it was.
        """
        session = self._by_notice_id.get(notice_id)
        if session is None or session.state not in (OPEN, DISCONNECTED):
            return False
        session.expired_notice(f.Expired(msg_id, address, router))
        return True
