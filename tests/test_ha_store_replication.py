"""
L{StoreReplication}'s replication server gives a catching-up backup
C{initial-replication-sync-timeout}.
"""

from types import SimpleNamespace

from twisted.internet.task import Clock

from meshroute.ha.replication import _DeadlinedServer


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
