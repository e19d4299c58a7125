"""
What the router does with a message whose time to live ran out
(docs/client-protocol.md, "Time to live"): its C{message.expired} record,
its place in this router's C{$expired} queue, and the notice its sender
asked for, if it did.

A notice is handed to the sender's session here when the message was
accepted here, or sent to its origin router as a non-persistent system
message (L{meshroute.router.system_messages}), best effort: lost with a
link or a router, as any non-persistent message may be.  The pure rules
(when a message has expired, how it is set aside, the sweep that finds
those nobody is about to take) are L{meshroute.expiry}'s.
"""

from typing import Callable

from twisted.logger import Logger

from meshroute.expiry import IN_BACKLOG, IN_QUEUE, IN_TRANSIT, emit_expired, set_aside
from meshroute.messages import EXPIRED_QUEUE, EXPIRY_NOTICES, NOTIFY_EXPIRY_HEADER, Message
from meshroute.router.message_events import address_of

log = Logger()


class ExpiredMessages:
    """
    Expired messages at router C{name}: recorded in C{event_log}, kept in
    C{queues}' C{$expired}, their notices sent through C{system}
    (L{meshroute.router.system_messages.SystemMessages}) with ids from
    C{ids}.

    @ivar sessions: who hands expiry notices to this router's client
        sessions: each is called C{(sender, msg_id, address, router)} and
        answers whether it knows that session
        (L{SessionRegistry.expired_notice
        <meshroute.sessions.registry.SessionRegistry.expired_notice>}).
    """

    def __init__(self, name: str, ids, clock, event_log, queues, system) -> None:
        self._name = name
        self._ids = ids
        self._clock = clock
        self._events = event_log
        self._queues = queues
        self._system = system
        self.sessions: list[Callable[[str, str, str, str], bool]] = []
        system.serve(EXPIRY_NOTICES, self._notice_arrived)

    def expired(self, message: Message, where: str) -> None:
        """
        C{message} (as it was addressed) expired C{where} and is now in
        this router's C{$expired}: C{message.expired}, and the notice its
        sender asked for, if it did.
        """
        emit_expired(self._events, message, where)
        session = message.headers.get(NOTIFY_EXPIRY_HEADER)
        if not session:
            return
        address = address_of(message)
        if message.origin == self._name:
            self._tell_session(session, message.msg_id, address, self._name)
            return
        notice = Message(
            msg_id=self._ids.next(), origin=self._name, dest_router=message.origin,
            dest_queue=EXPIRY_NOTICES, body=b"", persistent=False,
            headers={"session": session, "msg-id": message.msg_id, "address": address,
                     "router": self._name},
            accepted_at=self._clock.seconds(),
        )
        if not self._system.send(notice):
            log.info("message {msg_id} expired; no route to its origin {origin} now, so its "
                     "sender is not told", msg_id=message.msg_id, origin=message.origin)

    def moved(self, messages, where: str) -> None:
        """
        C{messages} expired C{where} and the store moved them to this
        router's C{$expired}: L{expired} for each, then its consumers are
        told.
        """
        for message in messages:
            self.expired(message, where)
        self._queues.notify(EXPIRED_QUEUE)

    def swept(self, message: Message) -> None:
        """
        The expiry sweep set C{message} aside
        (L{meshroute.expiry.ExpirySweep}).
        """
        self.expired(message, IN_QUEUE if message.dest_router == self._name else IN_BACKLOG)

    def transient(self, message: Message, where: str = IN_TRANSIT) -> None:
        """
        A non-persistent message expired before it was forwarded: it waits
        in this router's C{$expired} (in memory, as any non-persistent one).
        """
        self._queues.put_transient(EXPIRED_QUEUE, set_aside(message, self._name))
        self.expired(message, where)

    def _notice_arrived(self, notice: Message) -> None:
        headers = notice.headers
        self._tell_session(headers["session"], headers["msg-id"], headers["address"],
                           headers["router"])

    def _tell_session(self, session: str, msg_id: str, address: str, router: str) -> None:
        """
        Hand an expiry notice to the session C{session} of this router,
        through the first of L{sessions} that knows it.
        """
        for tell in self.sessions:
            if tell(session, msg_id, address, router):
                return
        log.info("message {msg_id} expired at {router}; its sender's session {session} is "
                 "gone, so it is not told", msg_id=msg_id, router=router, session=session)
