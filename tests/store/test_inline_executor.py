"""
The inline executor (L{meshroute.store.inline_executor}): every call
commits at once, in the calling thread.
"""

from meshroute.store import InlineExecutor, SQLiteStore
from support.store_testing import ROUTER, msg


def test_inline_executor_commits_each_call(tmp_path):
    store = SQLiteStore(str(tmp_path / "s.db"), executor=InlineExecutor(), router=ROUTER)
    opened = store.open()
    assert opened.called
    before = store.executor.commits
    for n in range(3):
        assert store.accept(msg(n)).called
    assert store.executor.commits - before == 3
    store.close()
