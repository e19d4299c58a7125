"""
C{[store]}: how the router's store commits (L{meshroute.store.sqlite},
L{meshroute.store.transactions}).
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class StoreConfig:
    """
    C{[store]}: C{sync} is C{"full"} (nothing acknowledged is ever lost) or
    C{"normal"} (a power failure may lose the last commits; a process crash
    loses nothing).  C{writer} is where the store commits: C{"adaptive"},
    a turn that brings little on the reactor thread at the turn's end and
    the rest on a writer thread (L{meshroute.store.adaptive_executor});
    C{"thread"}, everything on a writer thread of its own
    (L{meshroute.store.threaded_executor}); or C{"reactor"}, everything at
    the end of each reactor turn on the reactor thread
    (L{meshroute.store.turn_executor}).  C{min_free_disk}: the bytes the
    data-dir's disk must have free for the router to take new messages
    from its clients (L{meshroute.store.disk_space}; 0: no bound).
    """

    sync: str = "full"
    writer: str = "adaptive"
    min_free_disk: int = 64 * 1024 * 1024
