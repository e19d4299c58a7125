"""
The store's executors by C{[store] writer} name
(L{meshroute.store.writers}).
"""

from twisted.internet import reactor

from meshroute.store import AdaptiveExecutor, ThreadedExecutor, TurnExecutor
from meshroute.store.settings import StoreConfig
from meshroute.store.writers import store_executor
from support.fakes import RecordingReplication


def test_the_store_executor_is_the_one_store_writer_names():
    assert type(store_executor(StoreConfig(), reactor)) is AdaptiveExecutor
    assert type(store_executor(StoreConfig(writer="thread"), reactor)) is ThreadedExecutor
    assert type(store_executor(StoreConfig(writer="reactor"), reactor)) is TurnExecutor


def test_the_store_executor_takes_replication_and_a_guard():
    replication = RecordingReplication()
    executor = store_executor(StoreConfig(), reactor, replication=replication, guard=print)
    assert (executor.replication, executor.guard) == (replication, print)
