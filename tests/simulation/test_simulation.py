"""
The seeded fault simulation (docs/simulation.md) in CI: a fixed budget of
schedules on the in-memory mesh, every invariant checked after each; a
replay of one seed is the same run; and the invariants do catch a mesh
that loses messages.

C{MESHROUTE_SIM_SEED} and C{MESHROUTE_SIM_RUNS} move the budget (C{make
simulate} runs any range with more detail).
"""

import os
import subprocess
import sys

import pytest

from simulation import describe_failure, digest, simulate
from simulation.actors import Attempt, Delivery, Subscription
from simulation.invariants import check, exactly_once, producer_order, topic_promises
from simulation.runner import Outcome, run
from simulation.schedule import Consumer, Fault, Producer, Schedule, Send, generate

FIRST_SEED = int(os.environ.get("MESHROUTE_SIM_SEED", "0"))
#: The seeds C{make test} runs from FIRST_SEED; C{make test-slow} runs
#: the MORE_RUNS after them (the suite's time is short).
RUNS = int(os.environ.get("MESHROUTE_SIM_RUNS", "60"))
MORE_RUNS = 240
#: Failing seeds shrunk in the CI report (a shrink is tens of runs).
SHRUNK_IN_REPORT = 1


@pytest.mark.timeout(600)
def test_fault_simulation_budget(observe_errors):
    """
    Every schedule of the budget keeps every promise.  A failure lists
    every failing seed with what broke, and the first ones shrunk.
    """
    _every_promise_kept(range(FIRST_SEED, FIRST_SEED + RUNS), observe_errors)


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_fault_simulation_more_seeds(observe_errors):
    """
    The budget's next seeds, as L{test_fault_simulation_budget}.
    """
    _every_promise_kept(range(FIRST_SEED + RUNS, FIRST_SEED + RUNS + MORE_RUNS),
                        observe_errors)


def _every_promise_kept(seeds: range, observe_errors) -> None:
    report = simulate(seeds)
    # Errors logged during the runs were judged by the simulation itself
    # (an unexpected one is a violation of its seed).
    observe_errors.take(lambda event: True)
    print(report.summary())
    if report.failures:
        failing = sorted(report.failures.items())
        text = [describe_failure(seed, violations, minimise=index < SHRUNK_IN_REPORT)
                for index, (seed, violations) in enumerate(failing)]
        observe_errors.take(lambda event: True)
        pytest.fail(report.summary() + "\n\n" + "\n\n".join(text), pytrace=False)


def test_a_seed_replays_exactly(observe_errors):
    """
    Two runs of one seed give the same trace, event for event.
    """
    schedule = generate(15)
    assert len(schedule.faults) >= 3
    first, second = run(schedule).trace(), run(schedule).trace()
    observe_errors.take(lambda event: True)
    assert first == second
    assert len(first) > 1000


def test_a_seed_replays_exactly_in_another_process(observe_errors):
    """
    C{make simulate SEED=…} in a fresh process (another hash seed) replays
    the run the test saw.
    """
    here = digest(7)
    observe_errors.take(lambda event: True)
    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONHASHSEED": "12345",
           "PYTHONPATH": os.pathsep.join([os.path.dirname(tests), tests])}
    output = subprocess.run([sys.executable, "-m", "simulation", "--seed", "7", "--runs", "1",
                             "--digest"], env=env, capture_output=True, text=True, check=True)
    assert output.stdout.split() == ["7", here]


def test_schedules_print_and_load_back():
    for seed in range(30):
        schedule = generate(seed)
        assert Schedule.from_json(schedule.to_json()) == schedule
        assert 3 <= len(schedule.routers) <= 8
        # Up to 8, one per topic subscriber, two aimed at early sends'
        # commits and one at their accepts' hold.
        assert 1 <= len(schedule.faults) <= 8 + len(schedule.topic_subscribers) + 3
        assert 1 <= len(schedule.topic_subscribers) <= 4


def _small_schedule() -> Schedule:
    return Schedule(
        seed=-1, routers=("r0", "r1", "r2"), connectors=(("r0", "r1"), ("r1", "r2")),
        producers=(Producer("p0", "r0", 1 << 20),),
        consumers=(Consumer("c0", "r2", "q", 10, 0.05, 1),),
        sends=(Send(1.0, "p0", "q@r2", 30, True, False, False),),
        faults=(Fault(2.0, "crash", ("r1",), 2.0),),
    )


def test_a_mesh_that_keeps_its_promises_passes(observe_errors):
    assert check(run(_small_schedule())) == []


def test_a_mesh_that_loses_messages_is_caught(observe_errors, monkeypatch):
    """
    The invariants can fail: a router that acknowledges every tenth
    transfer without storing that message loses confirmed messages, and
    the simulation says which.
    """
    from dataclasses import replace

    from meshroute.router.destinations import Destinations

    placed = Destinations.arrival
    count = []

    def forgetful(self, message):
        # Every tenth transfer (alone or in a batch) is stored and
        # acknowledged under another id: the link sees nothing wrong, the
        # message itself is gone.
        count.append(message)
        stored, local, dead = placed(self, message)
        if len(count) % 10 == 0:
            stored = replace(stored, msg_id=stored.msg_id + "-forgotten")
        return stored, local, dead

    monkeypatch.setattr(Destinations, "arrival", forgetful)
    violations = check(run(_small_schedule()))
    assert {v.invariant for v in violations} == {"lost"}
    assert len(violations) >= 3


def _window_schedule() -> Schedule:
    """
    Early sends in flight when their origin dies: r0 commits in 30 ms, the
    others in 0.5 ms, and r0 crashes 10 ms after its second burst (its
    link to r1 holds a reserved block by then, so the burst goes early).
    """
    return Schedule(
        seed=-2, routers=("r0", "r1", "r2"), connectors=(("r0", "r1"), ("r1", "r2")),
        producers=(Producer("p0", "r0", 1 << 20),),
        consumers=(Consumer("c0", "r2", "q", 10, 0.05, 1),),
        sends=(Send(1.0, "p0", "q@r2", 5, True, False, False),
               Send(2.0, "p0", "q@r2", 20, True, False, False)),
        faults=(Fault(2.01, "crash", ("r0",), 1.0),),
        store_lags=(("r0", 0.03), ("r1", 0.0005), ("r2", 0.0005)),
    )


def test_a_crash_between_early_sends_and_their_commit_keeps_the_promises(
        observe_errors, monkeypatch):
    """
    The schedule the generator aims at the window, fixed: the crash loses
    accepts of sends that already left, and every promise still holds.
    """
    from meshroute.testing.memory_mesh import LaggingExecutor

    lost = []
    lose = LaggingExecutor.lose_uncommitted

    def losing(self):
        lost.extend(lose(self))

    monkeypatch.setattr(LaggingExecutor, "lose_uncommitted", losing)
    assert check(run(_window_schedule())) == []
    assert "accept_to_outbox" in lost


def _outcome(attempts, events, lost_with_disk=None):
    return Outcome(_small_schedule(), attempts, [], events, lost_with_disk or {}, [], [], [])


def _enqueued(router, epoch, msg_id, time):
    return (router, epoch, {"time": time, "router": router, "event": "message.enqueued",
                            "msg_id": msg_id})


def test_order_promise_is_a_parameter():
    """
    Two messages of one producer enqueued in reverse order break the
    strict promise; the weaker one excuses them only when a link closed
    in between.
    """
    attempts = [Attempt(f"p0-{n}", "p0", "q@r2", True, "", n, 0, 1.0, "confirmed", f"m{n}")
                for n in (1, 2)]
    reordered = [_enqueued("r2", 0, "m2", 3.0), _enqueued("r2", 0, "m1", 4.0)]
    closed = [("r0", 0, {"time": 2.0, "router": "r0", "event": "link.closed"})]
    assert [v.invariant for v in producer_order(_outcome(attempts, reordered))] == ["order"]
    assert producer_order(_outcome(attempts, reordered), promise=None) == []
    assert [v.invariant for v in producer_order(_outcome(attempts, reordered),
                                                promise="between-failures")] == ["order"]
    assert producer_order(_outcome(attempts, closed + reordered),
                          promise="between-failures") == []
    in_order = [_enqueued("r2", 0, "m1", 3.0), _enqueued("r2", 0, "m2", 4.0)]
    assert producer_order(_outcome(attempts, in_order)) == []


def test_only_what_a_wiped_store_held_may_be_missing():
    attempts = [Attempt(f"p0-{n}", "p0", "q@r2", True, "", n, 0, 1.0, "confirmed", f"m{n}")
                for n in (1, 2, 3)]
    events = [_enqueued("r2", 0, "m1", 3.0)]
    lost = exactly_once(_outcome(attempts, events, lost_with_disk={"m2": "r1"}))
    assert [(v.invariant, v.detail.split()[0]) for v in lost] == [("lost", "p0-3")]
    twice = exactly_once(_outcome(attempts[:1], events + [_enqueued("r2", 0, "m1", 5.0)]))
    assert [v.invariant for v in twice] == ["enqueued-twice"]
    # Once per incarnation of the destination's store is not twice.
    assert exactly_once(_outcome(attempts[:1], events + [_enqueued("r2", 1, "m1", 5.0)])) == []


def test_one_body_as_two_publications_of_two_incarnations_is_not_twice():
    """
    A publication retried with its duplicate id after its router's store
    was wiped is a second publication (the id went with the disk): a
    subscription may get both, unflagged.  The same publication twice
    unflagged, or two publications of one incarnation, is twice.
    """
    accepted = [("r1", epoch, {"time": 1.0, "router": "r1", "event": "message.accepted",
                               "msg_id": msg_id})
                for epoch, msg_id in ((0, "r1:a:23"), (1, "r1:b:23"))]

    def twice(first: str, second: str, redelivered=False, events=accepted) -> list:
        deliveries = [Delivery("s0", "r2", 0, f"{first}/$durable:s0:s0@r2", b"p0-23", False, 2.0),
                      Delivery("s0", "r2", 0, f"{second}/$durable:s0:s0@r2", b"p0-23",
                               redelivered, 3.0)]
        outcome = Outcome(_small_schedule(), [], deliveries, events, {}, [], [], [],
                          subscriptions={"s0": Subscription("s0", "r2", "t.#", False)})
        return [v.invariant for v in topic_promises(outcome)]

    assert twice("r1:a:23", "r1:b:23") == []
    assert twice("r1:a:23", "r1:a:23") == ["topic-twice"]
    assert twice("r1:a:23", "r1:a:23", redelivered=True) == []
    one_store = [(r, 0, record) for r, _, record in accepted]
    assert twice("r1:a:23", "r1:b:23", events=one_store) == ["topic-twice"]
