"""
Tests for the rule that holds topic publishers while the fan-out is
behind (L{meshroute.topics.backlog}): pure, depths in, decisions out.
"""

from hypothesis import given
from hypothesis import strategies as st

from meshroute.topics.backlog import DEFAULT_HOLD_AT, TopicBacklog


def test_publishers_are_held_from_the_limit_and_read_again_at_half():
    backlog = TopicBacklog(100)
    backlog.measured(99)
    assert not backlog.holding
    backlog.measured(100)
    assert backlog.holding
    read_again = []
    backlog.wait(lambda: read_again.append("a"))
    backlog.wait(lambda: read_again.append("b"))
    assert backlog.waiting == 2
    backlog.measured(51)  # below the limit, above half: still held
    assert backlog.holding and read_again == []
    backlog.measured(50)
    assert not backlog.holding
    assert read_again == ["a", "b"] and backlog.waiting == 0


def test_a_publisher_released_waits_again_only_if_held_again():
    backlog = TopicBacklog(10)
    backlog.measured(10)
    read_again = []
    backlog.wait(lambda: read_again.append(1))
    backlog.measured(0)
    backlog.measured(9)
    backlog.measured(0)
    assert read_again == [1]


def test_publishers_are_held_as_soon_as_the_depth_reaches_the_limit():
    # Between the fan-out's turns: asked for each read of sends.
    depth, changes = [0], []
    backlog = TopicBacklog(100, lambda: depth[0], lambda *change: changes.append(change))
    assert not backlog.holds_publishers()
    depth[0] = 100
    assert backlog.holds_publishers() and backlog.holds_publishers()
    depth[0] = 0  # only a turn's end reads them again
    assert backlog.holds_publishers()
    backlog.measured(0)
    assert not backlog.holding
    assert changes == [(True, 100), (False, 0)]


def test_the_default_is_sixteen_fan_out_turns():
    backlog = TopicBacklog()
    assert (backlog.hold_at, backlog.resume_at) == (DEFAULT_HOLD_AT, DEFAULT_HOLD_AT // 2)


@given(st.integers(2, 1000), st.lists(st.integers(0, 2000), max_size=50))
def test_held_exactly_between_reaching_the_limit_and_falling_to_half(limit, depths):
    backlog = TopicBacklog(limit)
    holding = False
    for depth in depths:
        backlog.measured(depth)
        holding = depth >= limit if not holding else depth > limit // 2
        assert backlog.holding == holding
