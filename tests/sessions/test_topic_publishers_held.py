"""
Tests that the router stops reading its topic publishers while the
fan-out is behind (L{meshroute.topics.backlog}, through
L{meshroute.sessions.sends}), over the real message engine and SQLite
store run inline on a C{task.Clock}: each fan-out turn takes 256
publications, so 600 published at once leave 344 in C{$topic} after the
first, past this engine's limit of 300, and 88 after the second, half of
it or fewer.
"""

import pytest

from meshroute.router.engine import MessageEngine
from meshroute.routing.table import RouteTable
from meshroute.wire import client_frames as f

from support.fake_router import ROUTER, RecordingEvents
from support.router_connection import Connection
from support.router_engine import store  # noqa: F401 (a fixture)
from support.served_sessions import make_factory

HOLD_AT = 300


@pytest.fixture
def engine(store, clock):  # noqa: F811
    engine = MessageEngine(ROUTER, store, RouteTable(ROUTER, clock), RecordingEvents(), clock,
                           hold_publishers_at=HOLD_AT)
    engine.start()
    yield engine
    engine.stop()


def opened(factory, session_id: str = "") -> Connection:
    client = Connection(factory)
    client.send(f.Open(list(f.SUPPORTED_VERSIONS), "c", session_id, 60000))
    answer = client.expect()
    assert isinstance(answer, f.Opened), answer
    client.session_id = answer.session_id
    return client


def publish(client: Connection, first: int, n: int, address: str = "topic:t.x") -> None:
    client.send(f.SendBatch(first, [[address, {}, b"p", True, ""] for _ in range(n)]))


def confirmed(client: Connection) -> int:
    return sum(len(frame.msg_ids) if isinstance(frame, f.Confirmed) else 1
               for frame in client.received() if isinstance(frame, (f.Confirm, f.Confirmed)))


def after_first_turn(clock, check) -> None:
    """
    Run C{check} between the fan-out's first turn and its second: the
    turns are calls of the clock at the same time, run in the order they
    were made, and the second is made by the first.
    """
    clock.callLater(0, check)
    clock.advance(0)


def test_a_publisher_is_not_read_while_the_fan_out_is_behind(engine, clock):
    factory = make_factory(engine, clock)
    flooder, polite, queue_sender = opened(factory), opened(factory), opened(factory)
    publish(flooder, 1, 600)

    def held() -> None:
        assert engine.topic_backlog.holding  # 344 wait after the first turn
        # What they read is accepted, and they are not read again...
        publish(flooder, 601, 10)
        publish(polite, 1, 1)
        assert flooder.transport.producerState == "paused"
        assert polite.transport.producerState == "paused"
        # ...while a sender to a queue is read as ever.
        publish(queue_sender, 1, 5, "q1")
        assert queue_sender.transport.producerState == "producing"
        assert engine.topic_backlog.waiting == 2

    after_first_turn(clock, held)
    assert engine.topic_backlog.waiting == 0 and not engine.topic_backlog.holding
    assert flooder.transport.producerState == "producing"
    assert polite.transport.producerState == "producing"
    assert (confirmed(flooder), confirmed(polite), confirmed(queue_sender)) == (610, 1, 5)


def test_a_publisher_gone_while_held_is_held_when_it_resumes_its_session(engine, clock):
    factory = make_factory(engine, clock)
    flooder = opened(factory)
    publish(flooder, 1, 600)
    resumed = []

    def held() -> None:
        publish(flooder, 601, 1)
        flooder.lose()
        again = opened(factory, flooder.session_id)
        # Still held: the session waits for the fan-out, whatever its
        # connection.
        assert again.transport.producerState == "paused"
        resumed.append(again)

    after_first_turn(clock, held)
    assert resumed[0].transport.producerState == "producing"
