"""
The store's executors by C{[store] writer} name: where a router's store
commits (L{meshroute.store.transactions} says what they all promise).
"""

from twisted.internet.interfaces import IReactorTime

from meshroute.store.adaptive_executor import AdaptiveExecutor
from meshroute.store.settings import StoreConfig
from meshroute.store.threaded_executor import ThreadedExecutor
from meshroute.store.turn_executor import TurnExecutor

#: C{[store] writer}'s choices: small turns on the reactor thread and the
#: rest on a writer thread, everything on a writer thread, or everything
#: at the end of each reactor turn.
WRITERS = {"adaptive": AdaptiveExecutor, "thread": ThreadedExecutor, "reactor": TurnExecutor}


def store_executor(store: StoreConfig, clock: IReactorTime, replication=None, guard=None):
    """
    A new, unstarted executor for a store, of the kind C{[store] writer}
    names, on C{clock} (a reactor), handing its transactions to
    C{replication} (an active HA instance's gate, or None) and checking
    C{guard} before each commit batch (a shared-store HA instance's lock,
    or None).
    """
    return WRITERS[store.writer](clock, replication=replication, guard=guard)
