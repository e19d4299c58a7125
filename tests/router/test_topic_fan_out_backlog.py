"""
Tests that the topic fan-out tells the publishers' backlog rule
(L{meshroute.topics.backlog}) how deep C{$topic} is after each of its
turns (L{meshroute.router.topic_fan_out}), persistent publications and
non-persistent ones alike, over the real engine and an inline store on a
C{task.Clock}.
"""

import pytest

from support.router_engine import engine, store  # noqa: F401 (fixtures)


@pytest.fixture
def depths(engine):  # noqa: F811
    "The depths the fan-out reported, each with whether publishers were held."
    backlog, reported = engine.topic_backlog, []
    measured = backlog.measured

    def spy(depth: int) -> None:
        measured(depth)
        reported.append((depth, backlog.holding))

    backlog.measured = spy
    engine.start()
    yield reported
    engine.stop()


@pytest.mark.parametrize("persistent", [True, False])
def test_each_turn_reports_what_waits_in_topic(engine, clock, depths, persistent):  # noqa: F811
    engine.topic_backlog.hold_at, engine.topic_backlog.resume_at = 300, 150
    engine.submit_many([("topic:t.x", {}, b"p", persistent, "")] * 600)
    clock.advance(0)
    # Turns of 256: held from the first (344 left), read again from the
    # second (88 left, half the limit or fewer).
    assert depths == [(344, True), (88, False), (0, False)]
