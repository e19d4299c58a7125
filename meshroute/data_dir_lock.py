"""
One process per data dir: a running router or HA instance holds an
exclusive lock on C{DATA-DIR/router.lock} for as long as it runs, and so
does a command that writes to a stopped one's files (C{meshroute ha
force-activate}).  Two routers on one store would each take the other's
messages for their own.  The lock is C{flock}'s, so the kernel releases it
when the process dies, however it dies: a SIGKILLed router's data dir is
free at once.
"""

import fcntl
import os

from meshroute.errors import MeshrouteError

#: The data dir's lock file.
LOCK_FILE = "router.lock"


class DataDirInUse(MeshrouteError):
    """
    Another process holds the data dir.
    """


def hold_data_dir(data_dir: str):
    """
    Take C{data_dir}'s lock.

    @return: the open lock file; closing it releases the lock.
    @raise DataDirInUse: another process holds it.
    """
    lock_file = open(os.path.join(data_dir, LOCK_FILE), "a")
    try:
        fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock_file.close()
        raise DataDirInUse(f"{data_dir} is in use by a running router") from None
    return lock_file
