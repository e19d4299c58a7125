"""
What the replication tests write to a primary's store and compare with
its replica: their messages (L{message}), and every row of a database
(L{rows}), which must be the same on both at the same position.
"""

import sqlite3

from meshroute.messages import Message
from support.store_testing import ROUTER


def rows(path) -> dict:
    """
    Every table of the database at C{path}, row for row.
    """
    with sqlite3.connect(path) as connection:
        tables = [t for (t,) in connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        return {t: sorted(connection.execute(f"SELECT * FROM {t}").fetchall(), key=repr)
                for t in tables}


def message(n: int, local: bool, origin: str = ROUTER) -> Message:
    """
    Message C{m<n>} from C{origin}, for a queue of the primary's router
    (C{local}) or of router-d, with a header when C{n} is odd.
    """
    return Message(f"m{n}", origin, ROUTER if local else "router-d", "q",
                   f"body {n}".encode(), headers={"n": n} if n % 2 else {},
                   accepted_at=1000.0 + n)
