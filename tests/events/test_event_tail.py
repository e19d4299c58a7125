"""
Following the event log by its path, as operators and log shippers do
(C{tail -F}, Fluent Bit, Vector, Filebeat, Promtail): the file being
written is always C{DATA-DIR/events/current.jsonl}, renamed away whole
when it is closed, so a follower of that path sees every event, across
rotations, in order and once.
"""

import json
import os
import shutil
import subprocess

import pytest
from twisted.internet.task import Clock

from support.routers import wait_until

from meshroute.events import CURRENT_FILE, EventLog, RotationSettings, event_files, events_dir

#: Records of about 56 bytes in files of at most 1024: a file holds 18, and
#: a round of 12 crosses at most one rotation.  A follower of a path can
#: only see a file it notices before the next one replaces it, which is
#: true of any follower, and of a router whose files close minutes apart.
ROUNDS = 12
PER_ROUND = 12
#: How long tail may take to print a round's records.
ROUND_TIMEOUT_S = 20.0


def printed(out) -> list[int]:
    """
    The numbers of the whole records C{tail} printed so far.
    """
    lines = out.read_bytes().splitlines(keepends=True)
    return [json.loads(line)["n"] for line in lines if line.endswith(b"\n")]


@pytest.mark.skipif(shutil.which("tail") is None, reason="needs tail (coreutils)")
@pytest.mark.parametrize("close_in_thread", [False, True])
def test_tail_F_on_the_current_file_sees_every_event_once_in_order(tmp_path, close_in_thread):
    data_dir = str(tmp_path / "data")
    clock = Clock()
    clock.advance(1_700_000_000)
    log = EventLog(data_dir, "r", clock, RotationSettings(max_file_size=1024),
                   close_in_thread=close_in_thread)
    out = tmp_path / "tail.out"
    with open(out, "wb") as stdout:
        # Started before the file exists, as an operator may.
        tail = subprocess.Popen(
            ["tail", "-F", "-n", "+1", "--sleep-interval=0.05",
             os.path.join(events_dir(data_dir), CURRENT_FILE)],
            stdout=stdout, stderr=subprocess.DEVNULL)
    try:
        written: list[int] = []
        for _ in range(ROUNDS):
            for _ in range(PER_ROUND):
                log.emit("e", n=len(written))
                written.append(len(written))
            clock.advance(0)
            wait_until(lambda: len(printed(out)) >= len(written), ROUND_TIMEOUT_S,
                       what=f"tail -F to print {len(written)} records")
            assert printed(out) == written
        log.close()
        assert len(event_files(data_dir)) >= ROUNDS * PER_ROUND // 18, "rotations"
    finally:
        tail.terminate()
        tail.wait()
    assert printed(out) == written
