"""
What a committed store transaction changed, as the statements that
changed it: the store's side of replication.

The store's functions (what L{meshroute.store.sqlite.SQLiteStore} hands
its executor) are deterministic: run on a database holding the same rows,
the same statements with the same parameters make the same changes (entry
ids included: AUTOINCREMENT reads C{sqlite_sequence}, which is replicated
too).  So a replicated store ships the statements themselves, not the rows
they touched.  A L{RecordingConnection} stands between the executor's
connection and the store's functions and keeps every statement that may
write; the executor drops what a function that raised had recorded (its
changes were rolled back to its SAVEPOINT), and turns what is left of a
committed transaction into one L{ChangeBatch}, which it hands to its
L{meshroute.interfaces.ICommitGate}.  Another store applies the batch with
L{apply_statements}.

A batch's C{position} counts the committed write transactions of the
store, continuous across epochs: batch N+1 applies to a store at position
N.  A transaction that only read is no batch.  The store keeps its own
position in its C{replication_state} row, committed with the batch.

The store defines all this in its own terms (statements, positions, an
epoch number to tag them with) and knows nothing of who replicates it or
why: the HA pair (L{meshroute.ha}) implements the gate.
"""

from dataclasses import dataclass
from functools import cached_property

import msgpack

#: The store's position, in its one-row C{replication_state} table
#: (schema version 5): the epoch and position of the last batch it holds.
READ_REPLICATION_STATE = "SELECT epoch, position FROM replication_state"
#: Sets it, in the transaction of the batch it names.
SET_REPLICATION_STATE = "UPDATE replication_state SET epoch = ?, position = ?"


#: One statement: C{(sql, params)} as run by C{execute} (params a tuple,
#: or a dict of named parameters), or C{(sql, [params, ...])} as run by
#: C{executemany}.
Statement = tuple


class BadChangeBatch(ValueError):
    """
    A plain form does not describe a L{ChangeBatch} (a peer's bug, or not
    a peer at all).
    """


@dataclass(frozen=True)
class ChangeBatch:
    """
    The changes of one committed store transaction.

    @ivar epoch: the epoch its gate named when they were committed (the
        epoch an HA pair's active served in).
    @ivar position: this transaction's number among the store's committed
        write transactions (the first is 1).
    @ivar statements: the write statements in the order they ran, each a
        L{Statement}.
    """

    epoch: int
    position: int
    statements: tuple

    @cached_property
    def packed_size(self) -> int:
        """
        The bytes of L{to_plain} packed (msgpack): what the replication
        log retains and what it weighs in a feed's frame.  Counted once:
        the batch's bodies make it about as costly to pack as the frame
        that carries it.
        """
        return len(msgpack.packb(self.to_plain(), use_bin_type=True))

    def to_plain(self) -> list:
        """
        This batch as lists, ints, strs, bytes, floats, bools and None
        (msgpack packs it as is): C{[epoch, position, [[sql, params,
        many], ...]]}, C{many} true for an C{executemany}'s list of
        parameter sets.
        """
        return [
            self.epoch,
            self.position,
            [[sql, params, type(params) is list] for sql, params in self.statements],
        ]

    @classmethod
    def from_plain(cls, plain) -> "ChangeBatch":
        """
        The batch that L{to_plain} gave C{plain} (after a msgpack round
        trip: tuples came back as lists).

        @raise BadChangeBatch: C{plain} is not such a form.
        """
        try:
            epoch, position, statements = plain
            batch = cls(epoch, position, tuple(
                (sql, [_parameters(p) for p in params] if many else _parameters(params))
                for sql, params, many in statements
            ))
        except (TypeError, ValueError) as e:
            raise BadChangeBatch(f"not a change batch: {e}") from None
        if (type(epoch) is not int or type(position) is not int or epoch < 0 or position < 1
                or not all(type(sql) is str for sql, _ in batch.statements)):
            raise BadChangeBatch(f"not a change batch: epoch {epoch!r}, position {position!r}")
        return batch


def _parameters(params):
    """
    One parameter set from its plain form: a dict stays, a list is a tuple.
    """
    if type(params) is dict:
        return params
    if type(params) is list:
        return tuple(params)
    raise TypeError(f"parameters must be a list or a map, not {type(params).__name__}")


_writes: dict[str, bool] = {}


def writes(sql: str) -> bool:
    """
    Whether C{sql} may change the database: everything but a SELECT.
    (The store's statements are constants, so the answer is cached.)
    """
    found = _writes.get(sql)
    if found is None:
        found = _writes[sql] = not sql.lstrip()[:6].upper() == "SELECT"
    return found


class RecordingConnection:
    """
    The store functions' view of the executor's sqlite3 connection while
    the store is replicated: C{execute} and C{executemany} run on the real
    connection and, when the statement may write and did not raise,
    append it to C{statements}, with its parameters exactly as run.  What
    they return is the real cursor (C{fetchone}, C{rowcount},
    C{lastrowid}, iteration and C{RETURNING} rows work as before).

    The executor marks where each function's statements start
    (C{len(statements)}) and cuts them off there with L{drop_after} when
    the function's changes are rolled back.
    """

    __slots__ = ("_connection", "statements")

    def __init__(self, connection) -> None:
        self._connection = connection
        #: The statements recorded since the transaction began.
        self.statements: list = []

    def execute(self, sql: str, parameters=()):
        if type(parameters) is list:
            parameters = tuple(parameters)
        cursor = self._connection.execute(sql, parameters)
        if writes(sql):
            self.statements.append((sql, parameters))
        return cursor

    def executemany(self, sql: str, seq_of_parameters):
        # Taken as a list first: an iterator would be used up by running.
        many = [tuple(p) if type(p) is list else p for p in seq_of_parameters]
        cursor = self._connection.executemany(sql, many)
        if many and writes(sql):
            self.statements.append((sql, many))
        return cursor

    def drop_after(self, mark: int) -> None:
        """
        Forget the statements recorded after the first C{mark} ones.
        """
        del self.statements[mark:]

    def take(self) -> tuple:
        """
        The statements recorded so far, forgotten here (a new transaction
        begins).
        """
        taken = tuple(self.statements)
        self.statements.clear()
        return taken


def apply_statements(connection, statements) -> None:
    """
    Run C{statements} (L{Statement}s, as recorded) on C{connection}, in
    order: the backup's side of L{RecordingConnection}.
    """
    execute = connection.execute
    executemany = connection.executemany
    for sql, params in statements:
        if type(params) is list:
            executemany(sql, params)
        else:
            execute(sql, params)
