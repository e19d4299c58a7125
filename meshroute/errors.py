"""
The meshroute error hierarchy.

Everything meshroute raises on purpose is a L{MeshrouteError}, so callers
can tell our refusals from bugs.  Errors that cross the wire carry a stable
C{code} string; the codes are listed in docs/protocol.md.
"""

from dataclasses import dataclass


class MeshrouteError(Exception):
    """
    Root of every error meshroute raises deliberately.
    """


class ConfigError(MeshrouteError):
    """
    A configuration file cannot be used.

    The message always names the file and the dotted key (C{section.key}),
    because an operator fixing a broken router needs both.
    """

    def __init__(self, path: str, key: str | None, message: str) -> None:
        self.path = path
        self.key = key
        self.message = message
        where = f"{path}: {key}" if key else path
        super().__init__(f"{where}: {message}")


@dataclass(frozen=True)
class Problem:
    """
    Something wrong with a combination of settings, as the rules of the
    component they configure find it: the TOML loader reports each as a
    L{ConfigError} (an error) or a line naming the file (a warning).

    @ivar key: the dotted key to name (C{ha.lease-timeout},
        C{routing.connector[1].router}: indexes from 0, as the
        configuration's arrays of tables).
    """

    key: str
    message: str


class NotServing(MeshrouteError):
    """
    A voter record of another group was to be saved by an HA instance
    that is not active: it answers no other group (it has no routing
    listener, and its C{store.db} is the replica).  A witness that meets
    it leaves the answer that rested on the record unsent, and logs no
    fault (L{meshroute.interfaces.IVoterRecords}).
    """


class WireError(MeshrouteError):
    """
    Bytes from a peer do not form a valid frame: garbage, truncated body,
    oversized length, unknown type or wrong field types.

    The protocol that sees it closes that one connection with reason
    C{protocol-error}; nothing else is affected.
    """


class DiskFull(MeshrouteError):
    """
    The router's disk has less free space than its C{[store]
    min-free-disk} (L{meshroute.store.disk_space}), or is full: no new
    message is taken until it has more.
    """

    code = "disk-full"


class StoreFull(MeshrouteError):
    """
    SQLite found the disk full: the write was not made.  Not a refusal
    (it has no C{code}): a client whose command failed so is told
    C{internal-error}, as for any failure of the router, since a send
    that left early may have reached the next hop all the same
    (docs/routing.md).  L{DiskFull} is what keeps a router from getting
    there.
    """
