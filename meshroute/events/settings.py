"""
The event log's settings (C{[events]}): when a file is closed and which
closed files are kept.
"""

from dataclasses import dataclass

MiB = 1024 * 1024


class RetainBytes(int):
    """
    A C{retain} given as a size: the closed files kept may total this many
    bytes.  (A plain C{int} C{retain} counts files.)
    """


@dataclass(frozen=True)
class RotationSettings:
    """
    C{[events]}: when the router closes its event file and starts the next
    one, and which closed files it keeps.

    @ivar max_file_size: bytes; the file is closed at the first record
        boundary that would take it past this.  A record longer than it
        is written alone to a file.
    @ivar max_age_ms: a file is closed this long after it was opened, by a
        timer, so that readers of closed files see events within it; None:
        only the size closes files.
    @ivar retain: closed files kept: a number of files (C{int}), or their
        total size (L{RetainBytes}); the oldest beyond it are deleted.
        None keeps every file.
    """

    max_file_size: int = 64 * MiB
    max_age_ms: int | None = None
    retain: int | None = None
