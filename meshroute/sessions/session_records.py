"""
The records a served session writes about its life (docs/events.md) and
the log lines beside them: opened (or recreated in place of one that was
gone), disconnected, reattached, expired, closed.  The session and its
reattachment write each through one function here, so that a record's
fields are the same wherever in the session its moment comes, and the
session's own code reads as what happens rather than what is recorded.
"""

from twisted.logger import Logger

from meshroute import events as event_names

log = Logger()


def opened(session, requested_session_id: str) -> None:
    """
    C{session} opened; C{requested_session_id}, when not empty, named a
    session that could not be resumed, which this one replaces.
    """
    session.events.emit(event_names.SESSION_OPENED, session_id=session.session_id,
                        client_id=session.client_id, ttl_ms=session.ttl_ms,
                        protocol=session.protocol)
    if requested_session_id:
        session.events.emit(event_names.SESSION_RECREATED, session_id=session.session_id,
                            client_id=session.client_id,
                            requested_session_id=requested_session_id)
        log.info("client session {requested} asked for by {client} is gone; new session "
                 "{session}", requested=requested_session_id, client=session.client_id or "-",
                 session=session.session_id)
    else:
        log.info("client session {session} opened for {client}",
                 session=session.session_id, client=session.client_id or "(anonymous)")


def disconnected(session, reason: str, keep_alive_ms: int) -> None:
    "C{session}'s connection is gone (for C{reason}) without Close."
    session.events.emit(event_names.SESSION_DISCONNECTED, session_id=session.session_id,
                        client_id=session.client_id, reason=reason,
                        keep_alive_ms=keep_alive_ms,
                        last_command_id=session.answers.last_command_id,
                        unacknowledged=len(session.deliveries.owners))
    log.info("client session {session} ({client}) disconnected ({reason}); kept for "
             "{keep_alive} ms", session=session.session_id,
             client=session.client_id or "-", reason=reason, keep_alive=keep_alive_ms)


def reattached(session, answers_resent: int, deliveries_resent: int, requeued: int,
               away: float) -> None:
    """
    C{session} was resumed on a new connection after C{away} seconds,
    re-sending what its client had not received.
    """
    session.events.emit(event_names.SESSION_REATTACHED, session_id=session.session_id,
                        client_id=session.client_id,
                        last_command_id=session.answers.last_command_id,
                        answers_resent=answers_resent, deliveries_resent=deliveries_resent,
                        requeued=requeued, disconnected_for_s=away)
    log.info("client session {session} ({client}) reattached after {seconds:.3f} s",
             session=session.session_id, client=session.client_id or "-", seconds=away)


def expired(session, requeued: int) -> None:
    "C{session}'s keep-alive passed; C{requeued} deliveries went back to their queues."
    session.events.emit(event_names.SESSION_EXPIRED, session_id=session.session_id,
                        client_id=session.client_id, requeued=requeued,
                        keep_alive_ms=session.settings.keep_alive_ms,
                        resumable=session.resumable)
    log.info("client session {session} ({client}) expired", session=session.session_id,
             client=session.client_id or "-")


def closed(session, reason: str) -> None:
    """
    C{session} ended: closed by its client (C{reason} C{client}), or
    abandoned (its connection lost while closing, or failed: C{reason} is
    then the error code).
    """
    session.events.emit(event_names.SESSION_CLOSED, session_id=session.session_id,
                        client_id=session.client_id, reason=reason)
    if reason == CLIENT:
        log.info("client session {session} closed by the client", session=session.session_id)


#: The C{reason} of a session closed by its client.
CLIENT = "client"
