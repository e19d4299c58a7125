"""
Files that hold secrets (the users file, the admin token file): only the
router's own user may read or write them, and they are replaced whole.

A secret in a file that other local users can read is no secret, and one
they can write lets them make themselves a user; so such a file stops the
router (or the command) with the C{chmod} that fixes it, rather than being
used with a warning nobody reads.  Writing goes through a temporary file
in the same directory and a rename, so a router reloading on SIGHUP reads
either the old file or the new one, never half of one.
"""

import os
import stat
import tempfile

from meshroute.durable_files import sync_directory
from meshroute.errors import ConfigError

#: The mode every secret file is written with and must have.
PRIVATE_MODE = 0o600


def exposure(mode: int) -> str | None:
    """
    Who besides the owner may read or write a file of C{mode}, as words
    (C{"readable by others"}), or None when nobody may.
    """
    for who, read, write in (("others", stat.S_IROTH, stat.S_IWOTH),
                             ("its group", stat.S_IRGRP, stat.S_IWGRP)):
        if mode & read:
            return f"readable by {who}"
        if mode & write:
            return f"writable by {who}"
    return None


def read_private(path: str, *, key: str | None = None, config: str | None = None) -> str:
    """
    The text of the secret file C{path}, refused if group or others may
    read or write it.

    @param config: the configuration file that names C{path} under
        C{key}, for errors; without it, errors name C{path} alone.
    @raise ConfigError: the file cannot be read, is not UTF-8, or is
        exposed ("FILE: readable by others (mode 0644); run chmod 600 FILE").
    """
    def refuse(message: str) -> ConfigError:
        if config is None:
            return ConfigError(path, None, message)
        return ConfigError(config, key, f"{path}: {message}")

    try:
        with open(path, "rb") as f:
            mode = os.fstat(f.fileno()).st_mode
            problem = exposure(mode)
            if problem is not None:
                raise refuse(f"{problem} (mode {stat.S_IMODE(mode):04o}); "
                             f"run chmod 600 {path}")
            data = f.read()
    except OSError as e:
        raise refuse(f"cannot read: {e.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise refuse(f"not UTF-8 text (byte {e.start})") from None


def write_private(path: str, text: str) -> None:
    """
    Replace C{path} with C{text} atomically, mode 0600 from the start.
    """
    directory = os.path.dirname(os.path.abspath(path))
    fd, temporary = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.",
                                     dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), PRIVATE_MODE)
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
    sync_directory(directory)
