"""
The frames of two-phase commit, version 7 of the native client protocol
(L{meshroute.wire.client_frames} gathers them with the others): a
transaction prepared under a transaction id, an I{xid}, and decided later
by that id, as Python's DB-API two-phase-commit extension (PEP 249) and
XA name it.

An xid is C{(format_id, global_id, branch)}: XA's format id, global
transaction id and branch qualifier.  On the wire they are three fields
of the frame (C{[format_id, global_id, branch]} arrays in L{Recovered}),
checked by L{xid_problem} when a frame is made or decoded.
docs/client-protocol.md, "Two-phase commit", tells when each frame may be
sent and how it is answered.
"""

from dataclasses import dataclass
from typing import ClassVar

from meshroute.errors import WireError

#: Most characters of an xid's global transaction id and of its branch
#: qualifier (PEP 249's 64 characters; XA's 64 bytes for ASCII ids).
MAX_XID_PART = 64
#: An xid's format id is a non-negative 32-bit signed integer (XA's).
MAX_FORMAT_ID = 2**31 - 1


def xid_problem(format_id, global_id, branch) -> str | None:
    """
    What is wrong with the xid C{(format_id, global_id, branch)}, or None:
    C{format_id} an integer from 0 to L{MAX_FORMAT_ID}, C{global_id} a
    string of 1 to L{MAX_XID_PART} characters, C{branch} one of at most
    L{MAX_XID_PART}.
    """
    if type(format_id) is not int or not 0 <= format_id <= MAX_FORMAT_ID:
        return f"format_id must be an integer from 0 to {MAX_FORMAT_ID}"
    if type(global_id) is not str or not 1 <= len(global_id) <= MAX_XID_PART:
        return f"global_transaction_id must be a string of 1 to {MAX_XID_PART} characters"
    if type(branch) is not str or len(branch) > MAX_XID_PART:
        return f"branch_qualifier must be a string of at most {MAX_XID_PART} characters"
    return None


class _NamesAnXid:
    """
    A command frame naming an xid in its fields C{format_id},
    C{global_id} and C{branch}, which are checked when it is made.
    """

    def __post_init__(self) -> None:
        problem = xid_problem(self.format_id, self.global_id, self.branch)
        if problem is not None:
            raise WireError(f"{type(self).__name__}: {problem}")

    @property
    def xid(self) -> tuple[int, str, str]:
        "C{(format_id, global_id, branch)}."
        return (self.format_id, self.global_id, self.branch)


@dataclass(frozen=True)
class Prepare(_NamesAnXid):
    """
    Client → router, command: make the transaction begun with C{Begin}
    durable as xid C{(format_id, global_id, branch)}, its Sends and Acks
    held (not carried out) until a L{CommitXid} or L{RollbackXid} of that
    xid, from any session.  Answered C{Confirm} once durable (the held
    Sends are answered when the transaction is decided), or C{Error} when
    it was rolled back instead (the code of a refused Send,
    C{duplicate-xid}, C{rolled-back}).
    """

    TYPE: ClassVar[int] = 30
    command_id: int
    format_id: int
    global_id: str
    branch: str


@dataclass(frozen=True)
class CommitXid(_NamesAnXid):
    """
    Client → router, command: commit the prepared transaction of the
    xid; with C{one_phase}, the session's current transaction instead, in
    one phase, its xid recorded as committed.  Answered C{Confirm} (after
    the held Sends' answers, when this session holds them) once durable,
    also for an xid committed before within the router's duplicate-id
    window; C{Error} C{unknown-xid}, C{duplicate-xid} (one phase: nothing
    done), C{heuristic-mixed}, or C{internal-error} (a prepared
    transaction then stays prepared).
    """

    TYPE: ClassVar[int] = 31
    command_id: int
    format_id: int
    global_id: str
    branch: str
    one_phase: bool


@dataclass(frozen=True)
class RollbackXid(_NamesAnXid):
    """
    Client → router, command: roll the prepared transaction of the xid
    back: its Sends are discarded, the messages it acknowledged go back to
    their queues, flagged redelivered.  Answered C{Confirm}, or C{Error}
    C{unknown-xid}, C{heuristic-commit} (it was committed) or
    C{heuristic-mixed}.
    """

    TYPE: ClassVar[int] = 32
    command_id: int
    format_id: int
    global_id: str
    branch: str


@dataclass(frozen=True)
class Recover:
    """
    Client → router, command: which transactions are prepared and not yet
    decided?  Answered by L{Recovered}.
    """

    TYPE: ClassVar[int] = 33
    command_id: int


@dataclass(frozen=True)
class Recovered:
    """
    Router → client, answers L{Recover}: the xids of the prepared
    transactions the session's user may decide (every one on a router
    without users), oldest first, each C{[format_id, global_id, branch]}.
    """

    TYPE: ClassVar[int] = 34
    command_id: int
    xids: list

    def __post_init__(self) -> None:
        for item in self.xids:
            if type(item) is not list or len(item) != 3 or xid_problem(*item) is not None:
                raise WireError("Recovered.xids must be [format_id: int, global_id: str, "
                                "branch: str] arrays of valid xids")
