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
    loses nothing).  C{writer} is where the store commits: C{"thread"}, on a
    writer thread of its own (L{meshroute.store.threaded_executor}), or
    C{"reactor"}, at the end of each reactor turn on the reactor thread
    (L{meshroute.store.turn_executor}).
    """

    sync: str = "full"
    writer: str = "thread"
