"""
What becomes of the application's calls when the session they were made
in is lost, so that none hangs and none is made twice in doubt.

 - A session recreated after a failure (the router no longer had the old
   one, L{meshroute.client.core}): every subscription the application
   holds is made again, with the same number; a call written whose
   outcome is unknown fails with L{UnblockedError
   <meshroute.client.errors.UnblockedError>} (the application decides
   whether to make it again), except an Unsubscribe forgetting a durable
   subscription the router may still keep, which is carried out again; a
   call not yet written goes out in the new session, but for
   acknowledgements and credit, which belonged to the old one
   (L{carry_over}).
 - A session that ended, or a call made once it is over: the call
   settles at once (L{unblock}, L{refuse}): an Unsubscribe succeeds (its
   subscription is gone with the session), anything else fails, and a
   Subscribe's subscription ends with the error.
"""

from meshroute.client.commands import ACK, CREDIT, SUBSCRIBE, UNSUBSCRIBE, Command
from meshroute.client.deliveries import Deliveries, is_resubscription


def carry_over(unknown: list[Command], waiting: list[Command],
               deliveries: Deliveries) -> tuple[list[Command], list[Command]]:
    """
    The calls of a lost session for the one recreated in its place:
    C{(again, unblocked)}, the commands to make in the new session, in
    order, and those that fail.

    @param unknown: the commands written whose outcome the loss made
        unknown.
    @param waiting: the commands not written yet.
    """
    # Every subscription the application holds is made again: the
    # re-subscriptions of an earlier recreation still waiting are void.
    again = deliveries.resubscriptions()
    waiting = [c for c in waiting if not is_resubscription(c)]
    subscribing = {c.subscription for c in again + waiting if c.kind == SUBSCRIBE}
    unblocked = []
    kept: list[Command] = []
    for command in unknown:
        if command.kind == UNSUBSCRIBE and (redo := deliveries.forget_again(command)):
            # A durable subscription the router may still keep.
            kept.extend(redo)
        elif not is_resubscription(command):
            unblocked.append(command)
    for command in waiting:
        if command.kind in (ACK, CREDIT):
            continue
        if command.kind == UNSUBSCRIBE and command.subscription not in subscribing:
            redo = deliveries.forget_again(command)
            if redo:
                kept.extend(redo)
            else:
                unblocked.append(command)
            continue
        kept.append(command)
    return again + kept, unblocked


def unblock(command: Command, error: Exception, deliveries: Deliveries) -> None:
    """
    C{command}'s session is gone: settle it with C{error} (an Unsubscribe
    succeeds, its subscription gone with the session).
    """
    if command.kind == UNSUBSCRIBE:
        deliveries.end(command.subscription, None)
    refuse(command, error, deliveries)


def refuse(command: Command, error: Exception, deliveries: Deliveries) -> None:
    """
    The session is over (or closing): C{command} cannot be made, and
    fails with C{error} (an Unsubscribe succeeds: there is nothing left
    to unsubscribe from).
    """
    if command.kind == UNSUBSCRIBE:
        command.deferred.callback(None)
        return
    if command.kind == SUBSCRIBE:
        deliveries.end(command.subscription, error)
    if command.deferred is not None:
        command.deferred.errback(error)
