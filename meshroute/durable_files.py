"""
Making what a router wrote to a file, or the file's name, survive a
power failure or an OS crash, not only a crash of the process: a file's
bytes are durable once it is fsynced, a rename or a new file's name once
its directory is.
"""

import os


def sync_file(path: str) -> None:
    """
    Write the file at C{path} to disk (what any process wrote to it).
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_directory(directory: str) -> None:
    """
    Write C{directory}'s entries to disk: the renames, creations and
    deletions made in it so far.
    """
    sync_file(directory)


def move_durably(path: str, new_path: str) -> None:
    """
    Rename C{path} to C{new_path}, and sync the directory so the rename
    survives a crash.
    """
    os.rename(path, new_path)
    sync_directory(os.path.dirname(new_path))
