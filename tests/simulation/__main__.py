"""
The simulation's command line: C{make simulate SEED=… RUNS=…}, or from
the checkout C{PYTHONPATH=tests .venv/bin/python -m simulation --help}.
"""

import argparse
import sys

from twisted.logger import globalLogBeginner

from simulation import ORDER_PROMISE, describe_failure, digest, simulate
from simulation.invariants import ORDER_PROMISES, check
from simulation.runner import run
from simulation.schedule import Schedule


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m simulation",
        description="Run seeded fault schedules on an in-memory meshroute mesh and check "
                    "its promises (docs/simulation.md).")
    parser.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    parser.add_argument("--runs", type=int, default=200, help="schedules to run (default 200)")
    parser.add_argument("--schedule", metavar="FILE",
                        help="replay one schedule printed as JSON by a failure")
    parser.add_argument("--order", choices=[*ORDER_PROMISES, "none"], default=ORDER_PROMISE,
                        help="the order promise to check (default %(default)s)")
    parser.add_argument("--no-shrink", action="store_true", help="print failing schedules whole")
    parser.add_argument("--digest", action="store_true",
                        help="print each seed's trace digest instead of checking")
    args = parser.parse_args(argv)
    order = None if args.order == "none" else args.order
    # The simulation observes the log itself; keep Twisted's start-up
    # buffer from printing the faults it injects.
    globalLogBeginner.beginLoggingTo([lambda event: None], redirectStandardIO=False)
    if args.schedule:
        with open(args.schedule, encoding="utf-8") as f:
            schedule = Schedule.from_json(f.read())
        print(schedule.describe())
        violations = check(run(schedule), order=order)
        for violation in violations:
            print(violation)
        return 1 if violations else 0
    seeds = range(args.seed, args.seed + args.runs)
    if args.digest:
        for seed in seeds:
            print(seed, digest(seed))
        return 0
    report = simulate(seeds, order=order)
    for seed, violations in sorted(report.failures.items()):
        print(describe_failure(seed, violations, order=order, minimise=not args.no_shrink))
        print()
    print(report.summary())
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
