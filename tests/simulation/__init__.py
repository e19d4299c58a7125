"""
The seeded fault simulation of a meshroute mesh (docs/simulation.md).

L{schedule.generate} draws a schedule from a seed (topology, clients,
traffic, faults); L{runner.run} plays it on the in-memory mesh with one
virtual clock; L{invariants.check} says which promises it broke;
L{shrink.shrink} minimises a failing schedule.  L{simulate} runs a range
of seeds and reports; C{python -m simulation} (C{make simulate}) is its
command line, and tests/simulation/test_simulation.py the CI budget.
"""

import hashlib
import time
from dataclasses import dataclass, field

from simulation.invariants import ORDER_PROMISE, check
from simulation.runner import run
from simulation.schedule import generate
from simulation.shrink import shrink


@dataclass
class Report:
    """
    What a range of seeds did: C{failures} maps a failing seed to its
    violations.
    """

    seeds: list = field(default_factory=list)
    faults: int = 0
    sends: int = 0
    failures: dict = field(default_factory=dict)
    seconds: float = 0.0
    #: Arrivals handed to a consumer from their receive (docs/routing.md).
    claimed: int = 0

    def summary(self) -> str:
        return (f"{len(self.seeds)} schedules, {self.faults} faults, {self.sends} send "
                f"bursts, {self.claimed} arrivals handed over from their receive, in "
                f"{self.seconds:.1f}s; {len(self.failures)} failed"
                + (f": seeds {sorted(self.failures)}" if self.failures else ""))


def simulate(seeds, order=ORDER_PROMISE) -> Report:
    """
    Run the schedule of every seed in C{seeds} and check it.
    """
    report = Report()
    started = time.monotonic()
    for seed in seeds:
        schedule = generate(seed)
        report.seeds.append(seed)
        report.faults += len(schedule.faults)
        report.sends += len(schedule.sends)
        outcome = run(schedule)
        report.claimed += outcome.claimed
        violations = check(outcome, order=order)
        if violations:
            report.failures[seed] = violations
    report.seconds = time.monotonic() - started
    return report


def describe_failure(seed: int, violations, order=ORDER_PROMISE, minimise=True) -> str:
    """
    A failing seed for people: its violations (the first few of each
    kind), how to replay it, and its schedule; with C{minimise}, shrunk to
    what still breaks the first invariant, also as JSON for
    C{--schedule}.
    """
    lines = [f"seed {seed} FAILED (replay: make simulate SEED={seed} RUNS=1)"]
    kinds: dict[str, list] = {}
    for violation in violations:
        kinds.setdefault(violation.invariant, []).append(violation)
    for invariant, found in kinds.items():
        lines.append(f"  {invariant}: {len(found)}")
        lines += [f"    {v.detail.splitlines()[0] if v.detail else ''}" for v in found[:3]]
    schedule = generate(seed)
    if not minimise:
        lines.append("  schedule:")
        lines += ["    " + line for line in schedule.describe().splitlines()]
        return "\n".join(lines)
    schedule, _ = shrink(schedule, violations[0].invariant, order=order)
    lines.append(f"  shrunk schedule (still breaks {violations[0].invariant}):")
    lines += ["    " + line for line in schedule.describe().splitlines()]
    lines.append("  as JSON (replay with --schedule FILE):")
    lines.append(schedule.to_json())
    return "\n".join(lines)


def digest(seed: int) -> str:
    """
    A hash of the trace of C{seed}'s run: equal in every process.
    """
    trace = run(generate(seed)).trace()
    return hashlib.sha256("\n".join(trace).encode()).hexdigest()
