"""
Tests for L{meshroute.store.pruning}: a running router forgets expired
duplicate-detection ids on a timer, a bounded chunk per store call, so its
disk stays bounded and a restart never does one huge delete.
"""

from twisted.internet.task import Clock

from meshroute.store import InlineExecutor, SQLiteStore
from meshroute.store.pruning import CHUNK_PAUSE_S, PRUNE_INTERVAL_S, IdPruner
from meshroute.testing.memory_mesh import MemoryMesh

ROUTER = "router-a"


def open_store(path, clock, window_s=60.0) -> SQLiteStore:
    store = SQLiteStore(str(path), "normal", InlineExecutor(), router=ROUTER, clock=clock,
                        dedup_window_s=window_s, duplicate_id_window_s=window_s)
    store.open()
    return store


def record_ids(store: SQLiteStore, n: int, at: float) -> None:
    """
    Write C{n} enqueued ids and C{n} duplicate ids recorded at time C{at}.
    """

    def write(connection):
        connection.executemany("INSERT INTO enqueued_ids (msg_id, at) VALUES (?, ?)",
                               [(f"m{at}-{i}", at) for i in range(n)])
        connection.executemany(
            "INSERT INTO duplicate_ids (duplicate_id, msg_id, at) VALUES (?, ?, ?)",
            [(f"d{at}-{i}", f"m{at}-{i}", at) for i in range(n)])

    store.executor.submit(write)


def counts(store: SQLiteStore) -> tuple[int, int]:
    """
    (enqueued ids, duplicate ids) in the store.
    """
    result = []

    def count(connection):
        return tuple(connection.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
                     for table in ("enqueued_ids", "duplicate_ids"))

    store.executor.submit(count).addCallback(result.append)
    return result[0]


class RecordingStore:
    """
    A store whose prune calls are recorded with what each one deleted.
    """

    def __init__(self, store: SQLiteStore) -> None:
        self._store = store
        self.deleted: list[tuple[str, int]] = []

    def _recorded(self, name: str, d):
        return d.addCallback(lambda n: self.deleted.append((name, n)) or n)

    def prune(self, limit=None):
        return self._recorded("enqueued", self._store.prune(limit))

    def prune_duplicate_ids(self, limit=None):
        return self._recorded("duplicate", self._store.prune_duplicate_ids(limit))


def test_expired_ids_are_pruned_in_bounded_chunks_until_none_is_left(tmp_path):
    clock = Clock()
    clock.advance(1000)
    store = open_store(tmp_path / "s.db", clock, window_s=60)
    record_ids(store, 25, at=1000.0)
    recording = RecordingStore(store)
    pruner = IdPruner(recording, clock, interval_s=100, chunk=10)
    pruner.start()
    clock.advance(0)
    # Nothing is older than the window yet: one look, and wait an interval.
    assert recording.deleted == [("enqueued", 0), ("duplicate", 0)]
    clock.advance(90)
    record_ids(store, 3, at=clock.seconds())
    clock.advance(10)  # the first 25 are now 100 s old, the last 3 10 s
    # One chunk per store call, the next one a moment later.
    assert recording.deleted[2:] == [("enqueued", 10), ("duplicate", 10)]
    assert counts(store) == (18, 18)
    clock.advance(CHUNK_PAUSE_S)
    assert counts(store) == (8, 8)
    clock.advance(CHUNK_PAUSE_S)
    assert counts(store) == (3, 3)
    assert all(n <= 10 for _, n in recording.deleted)
    # Then it waits for the next interval.
    assert [call.getTime() for call in clock.getDelayedCalls()] == [clock.seconds() + 100]
    pruner.stop()
    assert clock.getDelayedCalls() == []
    store.close()


def test_stop_does_not_wait_for_the_prune_in_progress_and_starts_no_other(tmp_path):
    """
    The chunk in progress is queued in the store, which finishes it
    before closing; its Deferred may never fire (an HA active's gate
    holds what it has not confirmed when the active stops serving), so
    stopping does not wait for it, and nothing is scheduled after it.
    """
    clock = Clock()

    class Held:
        """
        A store whose prunes finish only when the test says so.
        """

        def __init__(self):
            from twisted.internet.defer import Deferred

            self.pending = [Deferred(), Deferred()]
            self._next = iter(self.pending)

        def prune(self, limit=None):
            return next(self._next)

        prune_duplicate_ids = prune

    held = Held()
    pruner = IdPruner(held, clock, interval_s=10, chunk=5)
    pruner.start()
    clock.advance(0)
    pruner.stop()
    assert clock.getDelayedCalls() == []
    for d in held.pending:
        d.callback(5)  # a full chunk: more would wait, were it running
    assert clock.getDelayedCalls() == []


def test_a_running_router_forgets_expired_ids_without_a_restart(tmp_path):
    mesh = MemoryMesh(tmp_path)
    router = mesh.add("a", listen=False)
    store = router.store
    record_ids(store, 5, at=mesh.clock.seconds())
    assert counts(store) == (5, 5)
    mesh.run(max(store.dedup_window_s, store.duplicate_id_window_s) + 2 * PRUNE_INTERVAL_S)
    assert counts(store) == (0, 0)
    mesh.stop_all()
