"""
Minimising a failing schedule: drop faults, sends and clients, and halve
bursts, one at a time, keeping each change while the schedule still
breaks the same invariant.  What is left is the story of the bug.
"""

from dataclasses import replace

from simulation.invariants import check
from simulation.runner import run

#: Most runs one shrink may take.
MAX_TRIES = 60


def _candidates(schedule):
    """
    Smaller schedules, the biggest cuts first.
    """
    for index in range(len(schedule.faults)):
        yield replace(schedule, faults=schedule.faults[:index] + schedule.faults[index + 1:])
    for index in range(len(schedule.sends)):
        yield replace(schedule, sends=schedule.sends[:index] + schedule.sends[index + 1:])
    for index, burst in enumerate(schedule.sends):
        if burst.count > 1:
            smaller = replace(burst, count=burst.count // 2)
            yield replace(schedule, sends=schedule.sends[:index] + (smaller,)
                          + schedule.sends[index + 1:])
    used = {burst.producer for burst in schedule.sends} | {
        fault.target[0] for fault in schedule.faults if fault.kind.startswith("client-")}
    queues = {burst.address for burst in schedule.sends}
    for index, spec in enumerate(schedule.producers):
        if spec.name not in used:
            yield replace(schedule, producers=schedule.producers[:index]
                          + schedule.producers[index + 1:])
    for index, spec in enumerate(schedule.consumers):
        if f"{spec.queue}@{spec.router}" not in queues and spec.name not in used:
            yield replace(schedule, consumers=schedule.consumers[:index]
                          + schedule.consumers[index + 1:])


def shrink(schedule, invariant: str, order=None, max_tries: int = MAX_TRIES):
    """
    The smallest schedule found (within C{max_tries} runs) that still
    breaks C{invariant}, and its violations.
    """
    kwargs = {} if order is None else {"order": order}
    best = schedule
    violations = [v for v in check(run(schedule), **kwargs) if v.invariant == invariant]
    tries = 1
    progress = True
    while progress and tries < max_tries:
        progress = False
        for candidate in _candidates(best):
            if tries >= max_tries:
                break
            tries += 1
            found = [v for v in check(run(candidate), **kwargs) if v.invariant == invariant]
            if found:
                best, violations, progress = candidate, found, True
                break
    return best, violations
