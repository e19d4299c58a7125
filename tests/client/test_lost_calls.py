"""
What becomes of the calls of a lost session (meshroute.client.lost_calls),
over a recording fake of the session's deliveries.  The client's
failovers end to end are test_client_failover.py's.
"""

from twisted.internet.defer import Deferred

from meshroute.client.commands import ACK, CREDIT, SEND, SUBSCRIBE, UNSUBSCRIBE, Command
from meshroute.client.lost_calls import carry_over, refuse, unblock
from meshroute.wire import client_frames as f


class Deliveries:
    """
    Holds subscriptions C{again} to make again; an Unsubscribe of a
    subscription in C{durable} forgets it again in the new session.
    """

    def __init__(self, again=(), durable=()):
        self.again = list(again)
        self.durable = set(durable)
        self.ended = []

    def resubscriptions(self):
        return list(self.again)

    def forget_again(self, command):
        if command.subscription in self.durable:
            return [Command(UNSUBSCRIBE, f.Unsubscribe, (), command.deferred,
                            command.subscription)]
        return []

    def end(self, subscription, why):
        self.ended.append((subscription, why))


def command(kind, subscription=None, deferred=True):
    return Command(kind, f.Send, (), Deferred() if deferred else None, subscription)


def test_a_recreated_session_makes_subscriptions_and_unwritten_calls_again():
    resubscribe = command(SUBSCRIBE, "s1", deferred=False)
    deliveries = Deliveries(again=[resubscribe])
    in_doubt = command(SEND)
    stale_resubscribe = command(SUBSCRIBE, "s1", deferred=False)
    unwritten = [command(SEND), command(ACK, deferred=False), command(CREDIT, "s1", False),
                 stale_resubscribe]
    again, unblocked = carry_over([in_doubt], unwritten, deliveries)
    assert again == [resubscribe, unwritten[0]]
    assert unblocked == [in_doubt]


def test_an_unsubscribe_in_doubt_forgets_a_durable_subscription_again():
    deliveries = Deliveries(durable={"durable"})
    forget, plain = command(UNSUBSCRIBE, "durable"), command(UNSUBSCRIBE, "plain")
    again, unblocked = carry_over([forget, plain], [], deliveries)
    assert [(c.kind, c.subscription) for c in again] == [(UNSUBSCRIBE, "durable")]
    assert unblocked == [plain]


def test_an_unwritten_unsubscribe_of_a_subscription_made_again_goes_out():
    resubscribe = command(SUBSCRIBE, "s1", deferred=False)
    unsubscribe = command(UNSUBSCRIBE, "s1")
    again, unblocked = carry_over([], [unsubscribe], Deliveries(again=[resubscribe]))
    assert (again, unblocked) == ([resubscribe, unsubscribe], [])


def test_calls_of_an_ended_session_settle_at_once():
    deliveries = Deliveries()
    error = ValueError("gone")
    unsubscribe, subscribe, send = (command(UNSUBSCRIBE, "u"), command(SUBSCRIBE, "s"),
                                    command(SEND))
    for each in (unsubscribe, subscribe, send):
        unblock(each, error, deliveries)
    assert unsubscribe.deferred.result is None
    assert deliveries.ended == [("u", None), ("s", error)]
    for failed in (subscribe, send):
        assert failed.deferred.result.value is error
        failed.deferred.addErrback(lambda _: None)


def test_a_call_refused_once_the_session_is_over_ends_no_unsubscribed_subscription():
    deliveries = Deliveries()
    error = ValueError("over")
    unsubscribe, subscribe = command(UNSUBSCRIBE, "u"), command(SUBSCRIBE, "s")
    refuse(unsubscribe, error, deliveries)
    refuse(subscribe, error, deliveries)
    assert unsubscribe.deferred.result is None
    assert deliveries.ended == [("s", error)]
    subscribe.deferred.addErrback(lambda _: None)
