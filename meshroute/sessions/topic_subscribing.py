"""
A served session's topic subscriptions on their way in and out
(docs/client-protocol.md, "Topics"; docs/topics.md for what a
subscription is promised).

A C{SubscribeTopic} is checked as a C{Subscribe} is (its arguments, the
user's permission to subscribe with its pattern, C{max-subscriptions}
and C{max-unacknowledged}) and handed to the router's topic
subscriptions (C{engine.topics.subscribe}), which make it, a durable one
recorded in the store first: that takes a while, so the command is
answered only when the router's Deferred fires (a mesh-wide one's once
its interest reached every router reachable now), C{Confirm}, or
C{Error} with the code of what it failed with (C{bad-address},
C{subscription-in-use}, C{timeout}).  With C{retained} (version 9),
the retained messages matching its pattern are placed into it first
(docs/topics.md, "Retained messages").  Meanwhile its number is taken and its credit
counts (L{Deliveries.pending
<meshroute.sessions.deliveries.Deliveries.pending>}).  Once made it is
one of the session's subscriptions like any other (credit,
acknowledgements, redelivery, the keep-alive of a disconnected session,
its own queue's C{max-depth}): its consumer is made with no credit, and
the frame's credit is granted after the C{Confirm}, so that no delivery
goes ahead of it.

An C{Unsubscribe} with C{forget} ends the subscription as any
Unsubscribe does and then, for a durable one, forgets it at the router
(C{engine.topics.forget}: its messages are deleted), and is answered
then.  An Unsubscribe of a subscription still being made waits for it,
and is carried out as soon as it is.  A session that closes or ends
cancels its topic subscriptions with the others
(L{Deliveries.cancel_all
<meshroute.sessions.deliveries.Deliveries.cancel_all>}): a non-durable
one ends, a durable one keeps collecting for its next consumer.
"""

from dataclasses import dataclass, field
from functools import partial

from twisted.internet.defer import maybeDeferred

from meshroute.sessions.deliveries import no_subscription
from meshroute.topics.retained import RETAINED_CHOICES
from meshroute.wire import client_frames as f


@dataclass(eq=False)
class TopicSubscribing:
    """
    One served session's topic subscriptions being made, and its
    Unsubscribes that wait for them or forget durable ones.

    @ivar session: the L{meshroute.sessions.served.ServedSession}: its
        engine's topics, its user and client id, its deliveries and its
        answers.
    @ivar in_progress: subscribes and forgets the router has not answered
        yet (a closing session waits for them).
    @ivar waiting: subscription number → the Unsubscribe that came while
        it was being made.
    """

    session: object = field(repr=False)
    in_progress: int = 0
    waiting: dict = field(default_factory=dict)

    # -- subscribing ----------------------------------------------------------------

    def subscribe(self, frame: f.SubscribeTopic) -> None:
        """
        A SubscribeTopic the session accepted in sequence: refused at once
        if it breaks a rule of the session, else handed to the router.
        """
        session = self.session
        deliveries, guard = session.deliveries, session.guard
        refusal = deliveries.argument_refusal(frame)
        if refusal is None and frame.retained not in RETAINED_CHOICES:
            refusal = f.Error(frame.command_id, f.INVALID_ARGUMENT,
                              f"retained is one of {', '.join(RETAINED_CHOICES)}, "
                              f"not {frame.retained!r}")
        if refusal is None and guard is not None and not guard.may_subscribe(frame.pattern):
            refusal = f.Error(frame.command_id, f.NOT_ALLOWED,
                              guard.refusal(f"subscribe to {frame.pattern!r}"))
        if refusal is None:
            refusal = deliveries.limit_refusal(frame)
        if refusal is not None:
            session.answers.answer(frame.command_id, refusal)
            return
        deliveries.pending[frame.subscription] = frame.credit
        self.in_progress += 1
        # With no credit: the frame's is granted once the client has the
        # Confirm.  A durable subscription's client id is the frame's, or
        # else the session's (a STOMP client's CONNECT client-id).  A
        # mesh-wide one fires once its interest reached every router
        # reachable now (or fails, cancelled, with code timeout).
        d = maybeDeferred(session.engine.topics.subscribe, frame.pattern,
                          partial(deliveries.take, frame.subscription), 0,
                          client_id=frame.client_id or session.client_id,
                          durable=frame.durable, shared=frame.shared, user=session.user,
                          mesh_wide=frame.mesh_wide, retained=frame.retained)
        d.addCallbacks(self._made, self._not_made, (frame,), None, (frame,))

    def _made(self, subscription, frame: f.SubscribeTopic) -> None:
        """
        The router made the subscription C{frame} asked for: it is the
        session's, unless the session stopped consuming meanwhile or an
        Unsubscribe of it waits (it then ends at once, a durable one
        detached).
        """
        session, number = self.session, frame.subscription
        deliveries = session.deliveries
        self._settled(frame)
        unsubscribe = self.waiting.pop(number, None)
        ends = deliveries.stopped or unsubscribe is not None
        if ends:
            subscription.cancel()
        else:
            deliveries.subscriptions[number] = subscription
        session.answers.answer(frame.command_id, f.Confirm(frame.command_id, ""))
        if unsubscribe is not None:
            self._ended(unsubscribe, subscription)
        elif not ends and frame.credit:
            subscription.add_credit(frame.credit)
        session.check_drained()

    def _not_made(self, failure, frame: f.SubscribeTopic) -> None:
        """
        The router refused the subscription (or failed to make it): the
        client is told why.  An Unsubscribe that waited for it finds no
        subscription.
        """
        session = self.session
        self._settled(frame)
        session.answers.refuse(frame.command_id, failure, "subscribe")
        unsubscribe = self.waiting.pop(frame.subscription, None)
        if unsubscribe is not None:
            self._no_subscription(unsubscribe)
        session.check_drained()

    def _settled(self, frame: f.SubscribeTopic) -> None:
        self.in_progress -= 1
        del self.session.deliveries.pending[frame.subscription]

    # -- unsubscribing --------------------------------------------------------------

    def unsubscribe(self, frame: f.Unsubscribe) -> None:
        """
        An Unsubscribe the session accepted in sequence that forgets, or
        names a subscription still being made (which it waits for): the
        plain ones of live subscriptions are L{Deliveries.unsubscribe
        <meshroute.sessions.deliveries.Deliveries.unsubscribe>}'s.
        """
        number = frame.subscription
        if number in self.session.deliveries.pending:
            if number in self.waiting:
                self._no_subscription(frame)
            else:
                self.waiting[number] = frame
            return
        subscription = self.session.deliveries.cancel(number)
        if subscription is None:
            self._no_subscription(frame)
        else:
            self._ended(frame, subscription)

    def _ended(self, frame: f.Unsubscribe, subscription) -> None:
        """
        C{subscription}, which C{frame} named, is cancelled: answer, once
        the router forgot it if C{frame} asks to forget a durable one (a
        non-durable one ended with its consumer, and a queue's has
        nothing to forget).
        """
        session, command_id = self.session, frame.command_id
        durable = session.engine.topics.durable.get(subscription.queue) if frame.forget else None
        if durable is None:
            session.answers.answer(command_id, f.Confirm(command_id, ""))
            return
        self.in_progress += 1
        d = maybeDeferred(session.engine.topics.forget, durable.client_id, durable.name)
        d.addCallbacks(self._forgotten, self._not_forgotten, (command_id,), None, (command_id,))

    def _forgotten(self, _deleted: int, command_id: int) -> None:
        self.in_progress -= 1
        self.session.answers.answer(command_id, f.Confirm(command_id, ""))
        self.session.check_drained()

    def _not_forgotten(self, failure, command_id: int) -> None:
        # The subscription ended all the same; a shared one whose other
        # consumers are still there is subscription-in-use.
        self.in_progress -= 1
        self.session.answers.refuse(command_id, failure, "forget")
        self.session.check_drained()

    def _no_subscription(self, frame: f.Unsubscribe) -> None:
        self.session.answers.answer(frame.command_id, no_subscription(frame))
