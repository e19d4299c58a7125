"""
Rotated event files and the streaming audit, for its tests.

L{write_closed_files} lays lines out as a router's rotation does
(C{DIR/events/events-START-SEQ.jsonl}, sorted names = order, each
closed file newer than the one before); L{Follower} runs
C{meshroute audit --follow} as a process and reads its rolling
C{summary.json}.
"""

import fnmatch
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from support.routers import router_env, tail, wait_until

from meshroute.audit.follow import CLOSED_FILES
from meshroute.events import file_name

#: The first file's modification time: files of one router are closed in
#: order, a second apart.
FIRST_MTIME = 1_800_000_000


def is_closed(path: str) -> bool:
    """
    Whether C{path} is a closed event file, one the streaming audit reads
    (not C{current.jsonl}, nor a C{.open} file).
    """
    return fnmatch.fnmatch(os.path.basename(path), CLOSED_FILES)


def closed_file_name(start: float, seq: int) -> str:
    """
    The router's name (L{meshroute.events.file_name}) of closed file
    C{seq}, opened at C{start} (epoch seconds).
    """
    return file_name(time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(start)), seq)


def write_closed_files(lines: list[str], events_dir: Path, per_file: int,
                       start: float = FIRST_MTIME,
                       first_seq: int = 0, mtime: float = FIRST_MTIME) -> list[Path]:
    """
    Write C{lines} (each with its line end, the last one perhaps without)
    as closed files of C{per_file} lines into C{events_dir}; return them.
    """
    events_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for n, i in enumerate(range(0, len(lines), per_file)):
        path = events_dir / closed_file_name(start, first_seq + n)
        path.write_text("".join(lines[i:i + per_file]))
        os.utime(path, (mtime + n, mtime + n))
        written.append(path)
    return written


def rotate_copy(source: Path, events_dir: Path, per_file: int) -> list[Path]:
    """
    One router's whole C{events.jsonl} as closed files in C{events_dir}.
    """
    return write_closed_files(source.read_text().splitlines(keepends=True), events_dir,
                              per_file)


def add_closed_file(events_dir: Path, records: list[dict]) -> Path:
    """
    A new closed file after C{events_dir}'s last one (if any), newer
    than every file there, with C{records}.
    """
    events_dir.mkdir(parents=True, exist_ok=True)
    names = sorted(p.name for p in events_dir.glob("events-*.jsonl"))
    seq = int(names[-1][:-len(".jsonl")].rsplit("-", 1)[1]) + 1 if names else 0
    path = events_dir / closed_file_name(records[0]["time"], seq)
    path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records))
    later = max([(events_dir / name).stat().st_mtime for name in names]
                + [os.stat(events_dir).st_mtime]) + 1
    os.utime(path, (later, later))
    return path


class Follower:
    """
    C{meshroute audit --follow DIRS --out OUT [options]} running as a
    process, its stderr in C{OUT.stderr}.
    """

    def __init__(self, directories, out: Path, *options: str) -> None:
        self.out = Path(out)
        self.stderr_path = self.out.with_suffix(".stderr")
        self.args = [sys.executable, "-m", "meshroute.cli", "audit", "--follow",
                     *[str(d) for d in directories], "--out", str(out), *options]
        self._stderr = open(self.stderr_path, "a")
        self.popen = subprocess.Popen(self.args, env=router_env(), stdout=subprocess.PIPE,
                                      stderr=self._stderr, text=True)

    def summary(self) -> dict | None:
        try:
            return json.loads((self.out / "summary.json").read_text())
        except (OSError, ValueError):
            return None

    def wait_summary(self, predicate, timeout: float, what: str) -> dict:
        """
        Poll C{summary.json} until C{predicate(summary)}; return it.
        """
        def ready():
            if self.popen.poll() is not None:
                raise AssertionError(f"the streaming audit exited {self.popen.returncode}: "
                                     f"{tail(self.stderr_path)}")
            summary = self.summary()
            return summary if summary is not None and predicate(summary) else None
        return wait_until(ready, timeout, what=what, interval=0.5)

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def stop(self, timeout: float = 120.0) -> int:
        """
        SIGTERM, as an operator's service manager stops it; its exit status.
        """
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.communicate(timeout=timeout)
        finally:
            self.kill()
        return self.popen.returncode

    def wait(self, timeout: float) -> int:
        try:
            self.popen.communicate(timeout=timeout)
        finally:
            self.kill()
        return self.popen.returncode

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(30)
        self._stderr.close()
