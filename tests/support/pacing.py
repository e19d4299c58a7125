"""
A publisher loop at a steady rate, for process tests whose fault must
land while a flow is still going on: an unpaced in-process publisher may
be done before the test has seen the moment to strike on a fast host.
"""

import time
from collections.abc import Iterator


def paced(count: int, per_second: float) -> Iterator[int]:
    """
    Yield C{0 .. count - 1}, number C{i} no sooner than C{i / per_second}
    seconds after the first: a pause inside the loop that paces the
    publisher, never a way to wait for the system under test.
    """
    start = time.monotonic()
    for i in range(count):
        ahead = start + i / per_second - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
        yield i
