"""
L{StoreReplication}'s pieces: its replication server gives a catching-up
backup C{initial-replication-sync-timeout}; what the store commits is
confirmed only while the lease holds.
"""

from types import SimpleNamespace

from twisted.internet.task import Clock

from meshroute.ha.changes import ChangeBatch
from meshroute.ha.quorum import LogPosition
from meshroute.ha.replication import _Confirming, _DeadlinedServer


class Link:
    def __init__(self) -> None:
        self.shut = False

    def shutdown(self) -> None:
        self.shut = True


def following() -> tuple[Clock, _DeadlinedServer, Link]:
    """
    A serving server with a timeout of 30 s, and one follower's link.
    """
    clock = Clock()
    server = _DeadlinedServer(clock, 30_000)
    server.serve(object(), object())
    link = Link()
    server.feed(SimpleNamespace(send_while_open=lambda frame: None, peer="router-b", link=link),
                lambda why: None)
    return clock, server, link


def test_a_backup_not_in_sync_by_the_timeout_is_closed_to_start_again():
    clock, server, link = following()
    clock.advance(29.9)
    assert not link.shut
    clock.advance(0.1)
    assert link.shut


def test_a_backup_in_sync_in_time_keeps_its_connection():
    clock, server, link = following()
    clock.advance(10)
    server.caught_up()
    clock.advance(60)
    assert not link.shut
    assert clock.getDelayedCalls() == []


class Gate:
    """
    A gate that lets everything out at once, in epoch 3.
    """

    epoch = 3

    def committed(self, batch, fire) -> None:
        fire()


def test_nothing_is_confirmed_while_the_lease_is_not_held():
    """
    An active woken from SIGSTOP may commit before its overdue lease
    timer fences it: the lease is checked, by the clock, at each
    confirmation.
    """
    held = [True]
    confirmed, fired = [], []
    confirming = _Confirming(Gate(), confirmed.append, lambda: held[0])
    confirming.committed(ChangeBatch(3, 7, ()), lambda: fired.append(7))
    held[0] = False
    confirming.committed(ChangeBatch(3, 8, ()), lambda: fired.append(8))
    confirming.committed(None, lambda: fired.append("read"))
    assert fired == [7]
    assert confirmed == [LogPosition(3, 7)]
