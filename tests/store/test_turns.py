"""
A reactor turn's submissions gathered for one commit
(L{meshroute.store.turns.TurnGathering}), on a L{task.Clock}.
"""

from twisted.internet import task

from meshroute.store.transactions import RELAXED_DELAY_S
from meshroute.store.turns import TurnGathering


def gathering(clock):
    handed: list = []
    return TurnGathering(clock, handed.append), handed


def test_a_turns_items_are_handed_over_together_once_it_has_ended():
    clock = task.Clock()
    turn, handed = gathering(clock)
    turn.add("a", relaxed=False)
    turn.add("b", relaxed=True)
    assert len(turn) == 2 and handed == []
    # (task.Clock runs at once a call scheduled for now by a call it runs:
    # the turn's end and the pass after it.)
    clock.advance(0)
    assert handed == [["a", "b"]] and not turn
    assert clock.getDelayedCalls() == []


def test_relaxed_items_alone_wait_for_the_delay_or_for_an_item_that_does_not():
    clock = task.Clock()
    turn, handed = gathering(clock)
    turn.add("relaxed", relaxed=True)
    clock.advance(RELAXED_DELAY_S / 2)
    assert handed == []
    clock.advance(RELAXED_DELAY_S / 2)
    assert handed == [["relaxed"]]
    turn.add("relaxed again", relaxed=True)
    turn.add("not", relaxed=False)
    clock.advance(0)
    assert handed[-1] == ["relaxed again", "not"]
    assert clock.getDelayedCalls() == []


def test_take_hands_the_items_to_its_caller_and_cancels_the_hand_over():
    clock = task.Clock()
    turn, handed = gathering(clock)
    turn.add("a", relaxed=False)
    assert turn.take() == ["a"]
    assert clock.getDelayedCalls() == [] and not turn
    clock.advance(1)
    assert handed == []


def test_a_delay_after_the_turn_holds_the_hand_over_that_long():
    clock = task.Clock()
    turn, handed = gathering(clock)
    turn.delay_s = 0.25
    turn.add("a", relaxed=False)
    clock.advance(0)
    assert handed == []
    clock.advance(0.25)
    assert handed == [["a"]]
