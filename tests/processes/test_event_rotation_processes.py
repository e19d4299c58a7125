"""
Event-log rotation in real routers under load: with files closing every
1 MiB the batch audit counts every message exactly as it does one file,
and routers killed with SIGKILL while their files rotate constantly leave
every file readable and the audit's verdict clean.

Two routers, C{router-a} (where the producer sends) forwarding to
C{router-b} (where the consumer takes from queue C{q}), so that every
message has events in both routers' files.
"""

import json
import os
from pathlib import Path

import pytest

from support.closed_event_files import is_closed
from support.spark import spark  # noqa: F401 (a fixture)
from support.routers import mesh, wait_until  # noqa: F401 (mesh is a fixture)
from support.audit_testing import audit

from meshroute.audit.running import EXIT_OK
from meshroute.events import OPEN_SUFFIX, event_files

QUEUE = "q"
MiB = 1024 * 1024
#: Waits for the mesh and the clients on a loaded machine.
LOAD_TIMEOUT_S = 900.0


def two_routers(mesh, max_file_size: str):  # noqa: F811
    b = mesh.router("router-b", clients=True, events={"max-file-size": max_file_size})
    a = mesh.router("router-a", clients=True, connect=[b],
                    events={"max-file-size": max_file_size})
    a_proc, b_proc = mesh.start(a, b)
    a_proc.wait_delivery("router-b")
    return a, b, a_proc, b_proc


def lines_by_file(spec) -> dict[str, list[bytes]]:
    return {path: Path(path).read_bytes().splitlines(keepends=True)
            for path in event_files(str(spec.data_dir))}


def malformed(files: dict[str, list[bytes]]) -> list[tuple[str, int]]:
    """
    (file, line number) of every line that is not a JSON object ending in
    a line end.
    """
    bad = []
    for path, lines in files.items():
        for number, line in enumerate(lines, 1):
            try:
                ok = line.endswith(b"\n") and isinstance(json.loads(line), dict)
            except ValueError:
                ok = False
            if not ok:
                bad.append((path, number))
    return bad


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_200000_messages_through_files_rotating_every_mib_audit_exactly(
        mesh, spark, tmp_path):  # noqa: F811
    count = 200_000
    a, b, a_proc, b_proc = two_routers(mesh, "1 MiB")
    consumer = mesh.start_receive(b_proc, QUEUE, count, None, "--prefetch", "1000")
    sent = mesh.send(a_proc, f"{QUEUE}@router-b", count, timeout=LOAD_TIMEOUT_S)
    assert sent.returncode == 0, sent.stderr
    assert consumer.wait(LOAD_TIMEOUT_S) == 0, consumer.stderr
    assert len({m["id"] for m in consumer.messages()}) == count
    for process in (a_proc, b_proc):
        assert process.terminate() == 0, process.log_tail()

    for spec in (a, b):
        files = lines_by_file(spec)
        assert len(files) >= 20, f"{spec.label}: {len(files)} files: no rotation"
        assert all(map(is_closed, files)), "a clean stop closes"
        assert all(os.path.getsize(path) <= MiB for path in files)
        assert malformed(files) == []
    code, stdout, stderr, summary = audit(
        spark, [a.events_dir, b.events_dir], tmp_path / "audit", in_flight_grace_s=0.0)
    assert code == EXIT_OK, stdout + stderr
    messages = summary["messages"]
    assert messages["accepted"] == messages["enqueued"] == messages["consumed"] == count
    assert messages["lost"] == messages["duplicated"] == messages["in_flight"] == 0
    assert messages["orphans"] == 0
    assert summary["inputs"]["malformed"] == 0
    assert summary["inputs"]["files"] == sum(
        len(event_files(str(spec.data_dir))) for spec in (a, b))


def open_files(spec) -> list[str]:
    return [p for p in event_files(str(spec.data_dir)) if not is_closed(p)]


def all_threads_stopped(pid: int) -> bool:
    """
    Whether every thread of process C{pid} is stopped (state T).
    """
    states = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/stat") as f:
            states.append(f.read().rsplit(")", 1)[1].split()[0])
    return all(state == "T" for state in states)


def kill_mid_rotation(process, spec, load) -> dict[str, bytes]:
    """
    Freeze the router (SIGSTOP) until it is caught in the middle of a
    rotation: a file handed to the closer and not closed yet (C{.open})
    beside the file being written (C{current.jsonl}); then SIGKILL it.
    C{load()} before each try keeps the mesh under load however long that
    takes.

    @return: the files it left unclosed, with what they hold (one the
        router had just opened may be empty).
    """

    def caught():
        load()
        process.sigstop()
        wait_until(lambda: all_threads_stopped(process.pid), 10.0,
                   what=f"{spec.label} to stop")
        found = open_files(spec)
        if len(found) >= 2:
            return found
        process.sigcont()
        return None

    left = wait_until(caught, LOAD_TIMEOUT_S, what=f"{spec.label} caught closing a file")
    process.sigkill()
    return {path: Path(path).read_bytes() for path in left}


@pytest.mark.timeout(1800)
def test_routers_killed_mid_rotation_leave_every_file_readable_and_the_audit_clean(
        mesh, spark, tmp_path):  # noqa: F811
    """
    Files of 64 KiB close every few reactor turns under load; each router
    is killed (SIGKILL) in the middle of closing one and started again,
    while the producer and the consumer ride out the restarts.
    """
    batch = 10_000
    a, b, a_proc, b_proc = two_routers(mesh, "64 KiB")
    # A producer may start just before its router is frozen and killed:
    # its first connection retries as its reconnections do.
    retry = ("--initial-connect-attempts", "-1", "--reconnect-attempts", "-1",
             "--retry-interval", "100")
    consumer = mesh.start_receive(b_proc, QUEUE, None, None, "--prefetch", "1000", *retry)
    producers = []

    def load():
        # A producer of `batch` messages at a time, the next one started
        # as soon as the last is done, so a kill always finds load.
        if not producers or producers[-1].poll() is not None:
            producers.append(mesh.start_send(
                a_proc, f"{QUEUE}@router-b", batch, *retry,
                "--duplicate-id-prefix", f"rotation-{len(producers)}-"))

    left_open, restarted = {}, {}
    for spec, process in ((b, b_proc), (a, a_proc)):
        left_open[spec.label] = kill_mid_rotation(process, spec, load)
        restarted[spec.label] = mesh.spawn(spec)
        restarted[spec.label].wait_ready(LOAD_TIMEOUT_S)
    for producer in producers:
        assert producer.wait(LOAD_TIMEOUT_S) == 0, producer.stderr
    count = batch * len(producers)
    wait_until(lambda: len({m["id"] for m in consumer.messages()}) == count, LOAD_TIMEOUT_S,
               what=f"the consumer to receive {count} distinct messages")
    consumer.kill()
    for process in restarted.values():
        assert process.terminate() == 0, process.log_tail()

    for spec in (a, b):
        files = lines_by_file(spec)
        assert all(map(is_closed, files))
        for path, content in left_open[spec.label].items():
            if content:
                # Closed at the next start, a truncated last line ended:
                # the .open file under its name, current.jsonl under the
                # name its first record gives it.
                whole = content if content.endswith(b"\n") else content + b"\n"
                closed = [p for p, lines in files.items() if b"".join(lines) == whole]
                assert closed, f"{path} closed at the next start"
                if path.endswith(OPEN_SUFFIX):
                    assert closed == [path[:-len(OPEN_SUFFIX)]]
            elif path.endswith(OPEN_SUFFIX):
                assert not os.path.exists(path[:-len(OPEN_SUFFIX)]), "an empty file is deleted"
        bad = malformed(files)
        # At most the truncated last line of the file being written at the
        # kill, ended at the next start: the last line of its file.
        assert len(bad) <= 1, bad
        assert all(number == len(files[path]) for path, number in bad), bad
    code, stdout, stderr, summary = audit(
        spark, [a.events_dir, b.events_dir], tmp_path / "audit", in_flight_grace_s=0.0)
    assert code == EXIT_OK, stdout + stderr
    messages = summary["messages"]
    assert messages["lost"] == messages["duplicated"] == messages["in_flight"] == 0
    assert messages["enqueued"] == count
    # Only records of the turn a router was killed in can be missing: an
    # accept's makes its message an orphan, which the verdict allows.
    assert messages["accepted"] + messages["orphans"] == count
    assert summary["inputs"]["malformed"] <= 2
