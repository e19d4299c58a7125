"""
Wake-ups per message: what a router process asks of the kernel while it
forwards a paced message (C{throughput.py --wakeups}).

For each router, from just before the producer starts until the
destination queue is empty again:

  - system calls, all of them and the ones a paced message is made of by
    name, counted by C{perf stat} on the kernel's syscall tracepoints
    (counting only: nothing is recorded per call, so the router runs at
    its own speed);
  - futex calls that woke a thread (C{sys_exit_futex} returning more than
    0: a FUTEX_WAKE, or a WAKE_OP or requeue, that found a waiter), our
    measure of thread hand-overs: the GIL passing from one thread to
    another, a task put on the writer thread's queue while it waits, a
    Deferred's result handed back to a reactor thread blocked on the GIL;
  - context switches from C{/proc/PID/task/*/status}, voluntary (a thread
    blocked: C{epoll_wait}, a futex, a fsync) and involuntary (the
    scheduler took the CPU away), summed over the threads alive at the
    end, the reactor thread (the one whose id is the process's) apart.

Pure parsing and arithmetic; L{WakeupCounter} owns the C{perf} process.
"""

import os
import signal
import subprocess

#: The system calls counted by name: (label, perf event, ftrace filter).
#: C{futex_woke} is the hand-over measure (see the module docstring).
EVENTS = (
    ("syscalls", "raw_syscalls:sys_enter", None),
    ("futex", "syscalls:sys_enter_futex", None),
    ("futex_woke", "syscalls:sys_exit_futex", "ret > 0"),
    ("epoll_wait", "syscalls:sys_enter_epoll_wait", None),
    ("epoll_ctl", "syscalls:sys_enter_epoll_ctl", None),
    ("sendto", "syscalls:sys_enter_sendto", None),
    ("recvfrom", "syscalls:sys_enter_recvfrom", None),
    ("write", "syscalls:sys_enter_write", None),
    ("read", "syscalls:sys_enter_read", None),
    ("pwrite64", "syscalls:sys_enter_pwrite64", None),
    ("fcntl", "syscalls:sys_enter_fcntl", None),
    ("fdatasync", "syscalls:sys_enter_fdatasync", None),
    ("fsync", "syscalls:sys_enter_fsync", None),
)

#: The columns of the printed table: (label, key of L{per_message}, width).
COLUMNS = (
    ("syscalls", "syscalls", 8), ("futex", "futex", 6), ("woke", "futex_woke", 6),
    ("ep_wait", "epoll_wait", 7), ("ep_ctl", "epoll_ctl", 6), ("send", "sendto", 5),
    ("recv", "recvfrom", 5), ("write", "write", 5), ("read", "read", 5),
    ("pwrite", "pwrite64", 6), ("fcntl", "fcntl", 5), ("fdsync", "fdatasync", 6),
    ("cs vol", "voluntary", 6), ("(react)", "voluntary_reactor", 7),
    ("cs inv", "involuntary", 6),
)


def perf_argv(perf: str, pid: int, output: str) -> list[str]:
    """
    C{perf stat} counting L{EVENTS} in every thread of process C{pid}
    (threads it starts later included) until SIGINT, as CSV into
    C{output}.
    """
    argv = [perf, "stat", "-x", ",", "-o", output, "-p", str(pid)]
    for _, event, event_filter in EVENTS:
        argv += ["-e", event]
        if event_filter:
            argv += ["--filter", event_filter]
    return argv


def parse_perf_csv(text: str) -> dict[str, int]:
    """
    The counts of L{EVENTS} by label from C{perf stat -x ,} output: one
    line per event, in the order asked (the futex event appears twice, so
    the order, not the name, tells them apart), count first and event name
    third; comments and blank lines skipped.

    @raise ValueError: a count is missing ("<not counted>": the process
        was gone) or the lines are not the events asked for.
    """
    lines = [line.split(",") for line in text.splitlines()
             if line.strip() and not line.startswith("#")]
    if [fields[2] if len(fields) > 2 else None for fields in lines] != [e for _, e, _ in EVENTS]:
        raise ValueError(f"perf stat gave other events than asked:\n{text}")
    counts = {}
    for (label, event, _), fields in zip(EVENTS, lines):
        if not fields[0].isdigit():
            raise ValueError(f"perf stat did not count {event}: {fields[0]}")
        counts[label] = int(fields[0])
    return counts


def context_switches(pid: int) -> dict[int, tuple[int, int]]:
    """
    (voluntary, involuntary) context switches of each thread of C{pid}, by
    thread id; a thread that ends while being read is left out.
    """
    switches = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                fields = dict(line.split(":", 1) for line in f if "ctxt_switches" in line)
        except OSError:
            continue
        switches[int(tid)] = (int(fields["voluntary_ctxt_switches"]),
                              int(fields["nonvoluntary_ctxt_switches"]))
    return switches


def switches_between(pid: int, before: dict[int, tuple[int, int]],
                     after: dict[int, tuple[int, int]]) -> dict[str, int]:
    """
    Context switches from C{before} to C{after} (L{context_switches}),
    summed over the threads alive at the end (one started meanwhile counts
    from 0); the reactor thread's voluntary ones also apart.
    """
    voluntary = involuntary = 0
    for tid, (vol, inv) in after.items():
        vol0, inv0 = before.get(tid, (0, 0))
        voluntary += vol - vol0
        involuntary += inv - inv0
    reactor = after[pid][0] - before[pid][0] if pid in after and pid in before else 0
    return {"voluntary": voluntary, "voluntary_reactor": reactor, "involuntary": involuntary,
            "threads": len(after)}


def per_message(counts: dict[str, int], messages: int) -> dict[str, float]:
    """
    Every count divided by C{messages} (the thread count is left as it is).
    """
    return {key: value / max(1, messages) for key, value in counts.items() if key != "threads"}


class WakeupCounter:
    """
    Counts one router process's system calls, futex wake-ups and context
    switches between L{start} and L{stop}.
    """

    def __init__(self, perf: str, pid: int, output: str) -> None:
        """
        @param perf: the C{perf} executable.
        @param output: where C{perf stat} writes its counts.
        """
        self.perf, self.pid, self.output = perf, pid, output
        self.process: subprocess.Popen | None = None
        self.before: dict[int, tuple[int, int]] = {}

    def start(self) -> None:
        self.before = context_switches(self.pid)
        self.process = subprocess.Popen(perf_argv(self.perf, self.pid, self.output),
                                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE)

    def stop(self, timeout_s: float) -> dict[str, int]:
        """
        Read the context switches, stop C{perf stat} (SIGINT makes it write
        its counts) and return every count.

        @raise RuntimeError: perf failed or counted nothing.
        """
        switches = switches_between(self.pid, self.before, context_switches(self.pid))
        self.process.send_signal(signal.SIGINT)
        try:
            _, stderr = self.process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RuntimeError(f"perf stat on {self.pid} did not stop in {timeout_s:g} s")
        try:
            with open(self.output) as f:
                return dict(parse_perf_csv(f.read()), **switches)
        except (OSError, ValueError) as e:
            raise RuntimeError(f"perf stat on {self.pid} failed ({e}): "
                               f"{stderr.decode(errors='replace')}") from e

    def kill(self) -> None:
        """
        Make sure C{perf} is gone (after an error elsewhere).
        """
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def format_table(rows: list[tuple[str, str, dict[str, float]]]) -> list[str]:
    """
    The wake-ups table: a header, then one line per (row id, router,
    L{per_message} counts).
    """
    def line(cells):
        row_id, router, *numbers = cells
        return "  ".join([f"{row_id:<24}", f"{router:<9}"]
                         + [f"{n:>{w}}" for n, (_, _, w) in zip(numbers, COLUMNS)])

    lines = [line(["row", "router", *(label for label, _, _ in COLUMNS)])]
    for row_id, router, counts in rows:
        lines.append(line([row_id, router, *(f"{counts[key]:.2f}" for _, key, _ in COLUMNS)]))
    return lines


LEGEND = (
    "Per message delivered, per router, over the latency run (from just before the producer\n"
    "starts until the destination queue is empty).  syscalls: every system call (perf stat,\n"
    "raw_syscalls:sys_enter); futex: futex calls; woke: futex calls that woke a thread (the\n"
    "thread hand-overs: GIL passes, the writer's queue, results back to the reactor);\n"
    "ep_wait, ep_ctl, send (sendto), recv (recvfrom), write, read, pwrite (pwrite64), fcntl,\n"
    "fdsync (fdatasync): those calls by name; cs vol / cs inv: voluntary / involuntary\n"
    "context switches of all threads (/proc/PID/task/*/status), (react) the reactor thread's\n"
    "voluntary ones."
)
