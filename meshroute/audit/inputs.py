"""
Which files an audit reads, from its command-line arguments.

Kept apart from Spark (no pyspark import), so the command can refuse bad
arguments, and say pyspark is missing, before starting anything.
"""

import glob
import os
import urllib.parse

from meshroute.errors import MeshrouteError
from meshroute.events import CURRENT_FILE, OPEN_SUFFIX

#: What a directory argument contributes: these files below it, recursively
#: (a router's closed files, and the one it writes, C{current.jsonl}), and
#: those not closed yet (C{.jsonl.open}: being closed, or left by a router
#: that was killed and has not started since), so that a directory of
#: rotated files is read as its one file was.
LOG_SUFFIX = ".jsonl"
_LOG_SUFFIXES = (LOG_SUFFIX, LOG_SUFFIX + OPEN_SUFFIX)

#: The longest event line the audit reads, in bytes.  A router's events are
#: a few hundred bytes; a longer line means the file is not an event log
#: (or is damaged), and Spark would have to hold the whole line in one
#: value: a 300 MB single-line file ran the JVM out of memory.
MAX_EVENT_LINE_BYTES = 1024 * 1024


class AuditInputError(MeshrouteError):
    """
    The audit's input cannot be used: no such file, nothing to read, an
    unreadable file.  The command exits 1 with this message.
    """


def is_uri(path: str) -> bool:
    scheme = urllib.parse.urlsplit(path).scheme
    return len(scheme) > 1 and scheme != "file"


def _local(path: str) -> str:
    if path.startswith("file:"):
        return urllib.parse.unquote(urllib.parse.urlsplit(path).path)
    return path


def _files_under(directory: str) -> list[str]:
    """
    The event files below C{directory}, each directory's in the order a
    router wrote them: by name (C{events-START-SEQ}), then
    C{current.jsonl}, the newest, whose name sorts first.
    """
    found = []
    for root, dirs, files in os.walk(directory):
        dirs.sort()
        found.extend(os.path.join(root, name)
                     for name in sorted(files, key=lambda name: (name == CURRENT_FILE, name))
                     if name.endswith(_LOG_SUFFIXES))
    return found


def check_line_lengths(name: str, limit: int) -> None:
    """
    Refuse a file with a line longer than C{limit} bytes.

    It is read in chunks of C{limit} bytes, so a line that lies wholly
    within one chunk is shorter than the limit: only the run of bytes
    without a line end that crosses chunk boundaries needs counting.

    @raise AuditInputError: naming the file and the line.
    """
    newlines = 0
    since_newline = 0
    with open(name, "rb") as f:
        while chunk := f.read(limit):
            first = chunk.find(b"\n")
            if since_newline + (len(chunk) if first == -1 else first) > limit:
                raise AuditInputError(
                    f"{name}: line {newlines + 1} is longer than {limit} bytes, the longest "
                    "event line the audit reads (MAX_EVENT_LINE_BYTES): this is not an "
                    "event log, or it is damaged")
            if first == -1:
                since_newline += len(chunk)
            else:
                newlines += chunk.count(b"\n")
                since_newline = len(chunk) - chunk.rfind(b"\n") - 1


def resolve_inputs(paths: list[str], max_line_bytes: int | None = None) -> list[str]:
    """
    The files to read for the command-line arguments C{paths}.

    A local file is read whatever its name; a directory (a router's data
    dir, or its C{events/}) contributes every C{*.jsonl} and C{*.jsonl.open}
    file below it (recursively), in name order but C{current.jsonl} last; a glob (C{var/*/events/})
    is expanded, each match a file or directory as above.  A URI with a
    scheme other than C{file:} (C{hdfs://}, C{s3a://}) is handed to Spark
    as it is, globs and all.  Every argument must contribute at least one
    readable file, and no line of a local file may be longer than
    C{max_line_bytes} (default L{MAX_EVENT_LINE_BYTES}); a URI's files are
    not checked here.

    @raise AuditInputError: naming the argument that does not, or the file
        and line that is too long.
    """
    limit = MAX_EVENT_LINE_BYTES if max_line_bytes is None else max_line_bytes
    if not paths:
        raise AuditInputError("no event logs given")
    resolved: list[str] = []
    for path in paths:
        if is_uri(path):
            resolved.append(path)
            continue
        local = _local(path)
        if glob.has_magic(local):
            matches = sorted(glob.glob(local, recursive=True))
            if not matches:
                raise AuditInputError(f"{path}: no file matches")
        elif not os.path.exists(local):
            raise AuditInputError(f"{path}: no such file or directory")
        else:
            matches = [local]
        files = []
        for match in matches:
            files.extend(_files_under(match) if os.path.isdir(match) else [match])
        if not files:
            raise AuditInputError(f"{path}: no *{LOG_SUFFIX} event logs in it")
        for name in files:
            if not os.path.isfile(name) or not os.access(name, os.R_OK):
                raise AuditInputError(f"{name}: cannot be read")
            check_line_lengths(name, limit)
            resolved.append(os.path.abspath(name))
    return list(dict.fromkeys(resolved))


def display_name(uri: str) -> str:
    """
    C{file:/a/b%20c.jsonl} → C{/a/b c.jsonl}; other URIs unchanged.
    """
    return _local(uri) if uri.startswith("file:") else uri
