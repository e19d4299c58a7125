"""
The session's side of consuming (L{Deliveries}): its subscriptions by
number, the deliveries the router makes to them, and the
acknowledgements and credit the application gives back.

Acknowledgements are batched: those gathered travel in one C{Ack} (or
one C{AckThrough} per subscription, version 4), followed by the C{Credit}
they make room for, at the end of a turn; which turn, the command stream
decides (L{meshroute.client.command_stream.CommandStream.flush}).  A delivery id is
per session: C{delivered_up_to} is what a resuming Open reports, and a
delivery re-sent after a reattachment is dropped.  Each recreation of the
session is a new I{generation}: messages delivered in an earlier one can
no longer be acknowledged, and every subscription the application holds
is made again.
"""

import itertools
from collections.abc import Callable

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from meshroute.client.commands import ACK, CREDIT, SUBSCRIBE, UNSUBSCRIBE, Command
from meshroute.client.errors import ClientError, SubscribeError, unsupported
from meshroute.client.router_connection import RouterConnection
from meshroute.client.session_machine import ClientInputs, EndOfTurn
from meshroute.client.subscriptions import Subscription, TopicSubscription
from meshroute.wire import client_frames as f

log = Logger()


class Deliveries:
    """
    The subscriptions of one session, and what flows through them.

    @ivar subscriptions: the subscriptions made and not ended, by number.
    @ivar generation: bumped each time the session is recreated; messages
        delivered in an earlier generation can no longer be acknowledged.
    @ivar delivered_up_to: the highest delivery id received in this
        session.
    """

    def __init__(self, connection: RouterConnection, machine: ClientInputs,
                 end_of_turn: EndOfTurn) -> None:
        self._connection = connection
        self._machine = machine
        self._end_of_turn = end_of_turn
        self.subscriptions: dict[int, Subscription] = {}
        self._numbers = itertools.count(1)
        self.generation = 0
        self.delivered_up_to = 0
        # This turn's acknowledgements: delivery ids for one Ack, the
        # cumulative ones by subscription (version 4), and the credit
        # they give back.
        self._acks: list[int] = []
        self._through: dict[Subscription, int] = {}
        self._credit: dict[Subscription, int] = {}

    # -- subscribing ----------------------------------------------------------------

    def subscribe(self, make: Callable[..., Subscription], d: Deferred) -> None:
        """
        Make a subscription, C{make(deliveries, number)} (a L{Subscription}
        or L{TopicSubscription}, its other arguments bound); C{d} fires
        with it once the router confirmed.
        """
        number = next(self._numbers)
        subscription = make(self, number)
        self.subscriptions[number] = subscription
        frame_type, args = subscription.subscribe_frame(subscription.initial_credit())
        self._machine.submit(Command(SUBSCRIBE, frame_type, args, d, subscription))

    def unsubscribe(self, subscription: Subscription, forget: bool = False) -> Deferred:
        """
        Cancel C{subscription} (and C{forget} a durable topic
        subscription), after the acknowledgements made so far (so that
        they are not given back with the rest).
        """
        self._credit.pop(subscription, None)
        d = Deferred()
        for command in self.take_acks():
            self._machine.submit(command)
        self._machine.submit(_unsubscription(subscription, d, forget))
        return d

    def subscribed(self, command: Command) -> None:
        """
        The router confirmed C{command}, a Subscribe.
        """
        command.subscription.confirmed = True
        if command.deferred is not None:
            command.deferred.callback(command.subscription)

    def unsubscribed(self, command: Command) -> None:
        """
        The router confirmed C{command}, an Unsubscribe.
        """
        self.end(command.subscription, None)
        command.deferred.callback(None)

    def refused(self, command: Command, error: ClientError) -> None:
        """
        The router refused C{command}, a Subscribe or an Unsubscribe.
        """
        subscription = command.subscription
        if command.kind == SUBSCRIBE:
            self.end(subscription, error)
        if command.deferred is not None:
            command.deferred.errback(error)
        else:
            log.warn("router refused to subscribe to {queue} again: {code} {detail}",
                     queue=subscription.queue, code=error.code, detail=error.detail)

    def end(self, subscription: Subscription, why: Exception | None) -> None:
        """
        C{subscription} is over, for C{why} (None: as the application
        asked).
        """
        self.subscriptions.pop(subscription.number, None)
        subscription._finish(why)

    def stop_delivering(self) -> None:
        """
        The client is closing: no subscription takes deliveries any more.
        """
        for subscription in self.subscriptions.values():
            subscription.active = False

    def end_all(self, why: Exception | None) -> None:
        """
        The session ended, for C{why}: so did every subscription.
        """
        for subscription in self.subscriptions.values():
            subscription._finish(why)

    # -- a recreated session ----------------------------------------------------------

    def new_generation(self) -> None:
        """
        The session was recreated: deliveries start over.
        """
        self.generation += 1
        self.delivered_up_to = 0

    def resubscriptions(self) -> list[Command]:
        """
        The Subscribes that make every subscription the application holds
        again in a recreated session, by number, whether or not its
        re-subscription of an earlier recreation was answered (or even
        written): those are void.  A topic subscription cannot be made
        again by a router older than version 8 (the session moved to
        one): it ends, failing with code C{unsupported}.
        """
        again = []
        for _, subscription in sorted(self.subscriptions.items()):
            if not (subscription.active and subscription.confirmed):
                continue
            refusal = (self.topics_refusal() if isinstance(subscription, TopicSubscription)
                       else None)
            if refusal is not None:
                self.end(subscription, refusal)
                continue
            again.append(_resubscription(subscription))
        return again

    def forget_again(self, command: Command) -> list[Command]:
        """
        The commands that carry out C{command}, an Unsubscribe whose
        outcome the loss of the session made unknown, or that was not
        written, in the new session: a plain one has nothing left to do
        (its subscription went with the session), one that forgets a
        durable subscription attaches to it again (with no credit) and
        forgets it, for the router still keeps it.
        """
        subscription = command.subscription
        if not (isinstance(subscription, TopicSubscription) and subscription.forgetting
                and subscription.durable):
            return []
        frame_type, args = subscription.subscribe_frame(0)
        return [Command(SUBSCRIBE, frame_type, args, None, subscription),
                _unsubscription(subscription, command.deferred, True)]

    def topics_refusal(self, retained: bool = False) -> SubscribeError | None:
        """
        Why no topic subscription (asking for C{retained} messages) can be
        made now (the router is older than version 8, or 9), or None.
        """
        if retained:
            return unsupported(self._connection.version, f.RETAINED_VERSION,
                               "retained messages", SubscribeError)
        return unsupported(self._connection.version, f.TOPICS_VERSION, "a topic subscription",
                           SubscribeError)

    # -- deliveries -------------------------------------------------------------------

    def deliver(self, frame: f.Deliver) -> None:
        if frame.delivery_id <= self.delivered_up_to:
            # Re-sent after a reattachment although we had it.
            return
        self.delivered_up_to = frame.delivery_id
        self._end_of_turn.schedule()
        subscription = self.subscriptions.get(frame.subscription)
        if subscription is not None and subscription.active:
            subscription._delivered(frame.delivery_id, frame.msg_id, frame.origin,
                                    frame.headers, frame.body, frame.redelivered,
                                    self.generation)
        # Otherwise it is being cancelled: the router gives the message
        # back to the queue.

    def deliver_batch(self, frame: f.DeliverBatch) -> None:
        """
        Version 4: a subscription's deliveries of one turn, each as a
        Deliver's fields.
        """
        self._end_of_turn.schedule()
        subscription = self.subscriptions.get(frame.subscription)
        generation = self.generation
        for delivery_id, msg_id, origin, headers, body, redelivered in frame.deliveries:
            if delivery_id <= self.delivered_up_to:
                continue
            self.delivered_up_to = delivery_id
            if subscription is not None and subscription.active:
                subscription._delivered(delivery_id, msg_id, origin, headers, body,
                                        redelivered, generation)

    # -- acknowledgements -------------------------------------------------------------

    def ack(self, subscription: Subscription, delivery_id: int, credit: int) -> None:
        self._acks.append(delivery_id)
        if credit:
            self._credit[subscription] = self._credit.get(subscription, 0) + credit
        self._end_of_turn.schedule()

    def ack_through(self, subscription: Subscription, delivery_id: int, covered: list[int],
                    credit: int) -> None:
        """
        A cumulative acknowledgement: the subscription's deliveries up to
        C{delivery_id} (C{covered}, those it held).  One AckThrough per
        subscription and turn on a version-4 session, else their ids in
        this turn's Ack.
        """
        if self._connection.version >= f.BATCH_VERSION:
            self._through[subscription] = delivery_id
        else:
            self._acks.extend(covered)
        if credit:
            self._credit[subscription] = self._credit.get(subscription, 0) + credit
        self._end_of_turn.schedule()

    def has_acks(self) -> bool:
        """
        Acknowledgements or credit wait to be written.
        """
        return bool(self._acks or self._through or self._credit)

    def credit_wanted(self) -> bool:
        """
        A subscription is owed at least half its prefetch in credit: its
        router holds back that many deliveries until the credit comes.
        """
        return any(2 * credit >= subscription.prefetch
                   for subscription, credit in self._credit.items())

    def take_acks(self) -> list[Command]:
        """
        This turn's acknowledgements as one Ack command, then the Credit
        commands they make room for.
        """
        commands = []
        if self._acks:
            acks, self._acks = self._acks, []
            commands.append(Command(ACK, f.Ack, (acks,)))
        if self._through:
            through, self._through = self._through, {}
            for subscription, delivery_id in through.items():
                commands.append(Command(ACK, f.AckThrough, (subscription.number, delivery_id)))
        if self._credit:
            credit, self._credit = self._credit, {}
            for subscription, n in credit.items():
                if subscription.active:
                    commands.append(Command(CREDIT, f.Credit, (subscription.number, n), None,
                                            subscription))
        return commands

    def drop_acks(self) -> bool:
        """
        The session is gone: this turn's acknowledgements and credit were
        for its deliveries and subscriptions, and are dropped.

        @return: whether there were acknowledgements.
        """
        had_acks = bool(self._acks or self._through)
        self._acks = []
        self._through = {}
        self._credit = {}
        return had_acks


def _resubscription(subscription: Subscription) -> Command:
    """
    The client's own Subscribe that makes C{subscription} again (it has no
    Deferred: the application holds the subscription already).
    """
    frame_type, args = subscription.subscribe_frame(subscription.restart())
    return Command(SUBSCRIBE, frame_type, args, None, subscription)


def _unsubscription(subscription: Subscription, d: Deferred, forget: bool) -> Command:
    """
    The Unsubscribe of C{subscription}, which C{forget}s a durable topic
    subscription.
    """
    args = (subscription.number, True) if forget else (subscription.number,)
    return Command(UNSUBSCRIBE, f.Unsubscribe, args, d, subscription)


def is_resubscription(command: Command) -> bool:
    """
    Whether C{command} is the client's own Subscribe of a recreation
    (rather than the application's).
    """
    return command.kind == SUBSCRIBE and command.deferred is None
