"""
Shared helpers for benchmarks that start real routers on loopback:
free ports, /proc readings, child processes (routers under C{twistd -n
meshroute}, worker roles of the benchmark script itself) that are all
killed whatever happens, admin API polling and the plain-text table.

The same approach as backlog.py and handshake.py (which keep their own
copies); new benchmarks import this module instead.
"""

import json
import math
import os
import resource
import shutil
import sys
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from twisted.internet import defer, protocol, task  # noqa: E402
from twisted.internet.endpoints import TCP4ClientEndpoint  # noqa: E402
from twisted.web.client import Agent, readBody  # noqa: E402

from meshroute.testing.ports import PortAllocator  # noqa: E402

warnings.filterwarnings("ignore", "Using readBody with a transport", DeprecationWarning)

SECRET = b"benchmark secret"
#: The longest we wait for a router to start or stop.
DEADLINE_S = 60.0
POLL_S = 0.1


_PORTS = PortAllocator()


def free_port() -> int:
    """
    A free port on 127.0.0.1 for a router or broker to listen on, from
    below the ephemeral range: one bound 0 hands out is free only until
    the next outgoing connection takes it, and a broker started minutes
    later (compare.py's RabbitMQ) failed with "address already in use".
    """
    return _PORTS.allocate()


def rss_kib(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    except (OSError, StopIteration):
        return None


def cpu_s(pid: int) -> float:
    """
    utime + stime of process C{pid} (all its threads), in seconds; 0 when gone.
    """
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_s() -> float:
    """
    CPU seconds the whole machine spent busy (all CPUs), from /proc/stat.
    """
    with open("/proc/stat") as f:
        ticks = [int(v) for v in f.readline().split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = ticks
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def own_cpu_s(children: list) -> float:
    """
    CPU seconds of this process and every child it started.
    """
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total + sum(cpu_s(c.pid) for c in children if not c.ended.called)


class Meter:
    """
    How much CPU processes other than ours took over an interval (as a
    fraction of one CPU), and the load averages at its ends.
    """

    def __init__(self) -> None:
        self._start = (time.monotonic(), machine_busy_s(), own_cpu_s(Child.started))
        self.load_start = os.getloadavg()[0]

    def stop(self) -> tuple[float, float, float]:
        """
        @return: (others' CPU fraction, 1-min load average at start, at end).
        """
        end = (time.monotonic(), machine_busy_s(), own_cpu_s(Child.started))
        wall = end[0] - self._start[0]
        others = max(0.0, (end[1] - self._start[1]) - (end[2] - self._start[2]))
        return (others / wall if wall > 0 else 0.0), self.load_start, os.getloadavg()[0]


def raise_nofile(wanted: int) -> int:
    """
    Raise this process's RLIMIT_NOFILE soft limit towards C{wanted} (at most
    the hard limit); children inherit it.  Returns the soft limit in force.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft


def max_rss_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


class ProcessExited(RuntimeError):
    """
    A process under test is gone.
    """


class Child(protocol.ProcessProtocol):
    """
    A Python child process: C{ended} fires with its exit code; its output is
    kept.  Every child is in C{Child.started}, so that L{kill_all} can kill
    them whatever happens to the benchmark.
    """

    started: list["Child"] = []

    def __init__(self, reactor, argv: list[str], workdir: str, name: str) -> None:
        Child.started.append(self)
        self.name = name
        self.ended, self.output, self.stdout = defer.Deferred(), b"", b""
        pythonpath = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
        self.process = reactor.spawnProcess(self, sys.executable, [sys.executable, *argv],
                                            path=workdir,
                                            env=dict(os.environ, PYTHONPATH=pythonpath))
        self.pid = self.process.pid

    def childDataReceived(self, fd: int, data: bytes) -> None:
        self.output += data
        if fd == 1:
            self.stdout += data

    def processEnded(self, reason) -> None:
        self.ended.callback(reason.value.exitCode)

    def check_alive(self) -> None:
        if self.ended.called:
            raise ProcessExited(f"{self.name} exited:\n{self.output.decode(errors='replace')}")

    def rss(self) -> int | None:
        return None if self.ended.called else rss_kib(self.pid)

    def cpu(self) -> float:
        return 0.0 if self.ended.called else cpu_s(self.pid)

    def stdout_line(self, prefix: str) -> dict | None:
        """
        The JSON after C{prefix} on the first stdout line starting with it.
        """
        for line in self.stdout.decode(errors="replace").splitlines():
            if line.startswith(prefix):
                return json.loads(line[len(prefix):])
        return None

    async def wait_line(self, reactor, prefix: str, deadline: float) -> dict:
        async def check():
            self.check_alive()
            return self.stdout_line(prefix)
        return await poll(reactor, f"{self.name} to print {prefix!r}", check,
                          lambda r: r is not None, deadline)

    async def stop(self, reactor) -> int:
        if not self.ended.called:
            self.process.signalProcess("TERM")
        return await self.ended.addTimeout(DEADLINE_S, reactor)

    def kill(self) -> defer.Deferred:
        if not self.ended.called:
            self.process.signalProcess("KILL")
        return self.ended


def kill_all(reactor) -> defer.Deferred:
    ended = defer.DeferredList([c.kill() for c in Child.started if not c.ended.called])
    return ended.addTimeout(DEADLINE_S, reactor)


class Router:
    """
    One router's directory, ports and configuration (C{template} formatted
    with C{name}, C{client_port}, C{admin_port} and C{fields}); L{start}
    runs C{twistd -n meshroute} in it.
    """

    def __init__(self, reactor, workdir: str, name: str, template: str, **fields) -> None:
        self._reactor = reactor
        self.name = name
        self.workdir = os.path.join(workdir, name)
        os.makedirs(self.workdir)
        self.client_port, self.admin_port = free_port(), free_port()
        self.child: Child | None = None
        self._agent = Agent.usingEndpointFactory(reactor, self)
        with open(os.path.join(self.workdir, "secret"), "wb") as f:
            f.write(SECRET)
        self.configure(template, **fields)

    def configure(self, template: str, **fields) -> None:
        """
        (Re)write the configuration, e.g. once other routers' ports are
        known.
        """
        with open(os.path.join(self.workdir, "router.toml"), "w") as f:
            f.write(template.format(name=self.name, client_port=self.client_port,
                                    admin_port=self.admin_port, **fields))

    @property
    def client_endpoint(self) -> str:
        return f"tcp:127.0.0.1:{self.client_port}"

    async def start(self) -> None:
        """
        Start the router and wait for its admin API.
        """
        argv = ["-c", "from twisted.scripts.twistd import run; run()", "-n", "--pidfile=",
                "--logfile=router.log", "meshroute", "--config", "router.toml"]
        self.child = Child(self._reactor, argv, self.workdir, self.name)
        await poll(self._reactor, f"{self.name}'s admin API", lambda: self.get("router"))

    async def stop(self) -> int:
        code = await self.child.stop(self._reactor)
        if code != 0:
            raise RuntimeError(f"{self.name} exited {code} on SIGTERM:\n"
                               f"{self.child.output.decode(errors='replace')}")
        return code

    def endpointForURI(self, uri):
        return TCP4ClientEndpoint(self._reactor, "127.0.0.1", self.admin_port)

    async def get(self, path: str):
        self.child.check_alive()
        url = f"http://127.0.0.1:{self.admin_port}/api/v1/{path}"
        return json.loads(await readBody(await self._agent.request(b"GET", url.encode())))


async def poll(reactor, what: str, check, done=bool, deadline: float = DEADLINE_S):
    """
    Await C{check()} every POLL_S until C{done(result)}; errors other than
    L{ProcessExited} count as not done yet.
    """
    end = reactor.seconds() + deadline
    while True:
        try:
            result, last = await check(), None
        except ProcessExited:
            raise
        except Exception as e:
            result, last = None, e
        if last is None and done(result):
            return result
        if reactor.seconds() > end:
            raise RuntimeError(f"timed out waiting for {what} (last error: {last!r})")
        await task.deferLater(reactor, POLL_S)


def windowed(count: int, window: int, start_one) -> defer.Deferred:
    """
    Run C{start_one(i)} for i in range(count) with at most C{window}
    outstanding; fire when all have fired, or with the first failure.
    """
    done = defer.Deferred()
    state = {"next": 0, "finished": 0}

    def launch() -> None:
        i = state["next"]
        state["next"] += 1
        start_one(i).addCallbacks(finished, failed)

    def finished(_) -> None:
        state["finished"] += 1
        if state["next"] < count:
            launch()
        elif state["finished"] == count:
            done.callback(None)

    def failed(failure) -> None:
        if not done.called:
            done.errback(failure)

    for _ in range(min(window, count)):
        launch()
    return done


def spawn_role(reactor, script: str, workdir: str, role: str, *args) -> Child:
    """
    Run C{script role args...} (a worker mode of a benchmark script).
    """
    return Child(reactor, [os.path.abspath(script), role, *map(str, args)], workdir, role)


def role_result(child: Child, code: int) -> dict:
    """
    The JSON a worker printed on its last stdout line; raises if it failed.
    """
    if code != 0:
        raise RuntimeError(f"{child.name} exited {code}:\n{child.output.decode(errors='replace')}")
    return json.loads(child.stdout.decode().strip().splitlines()[-1])


def percentile(values: list[float], p: float) -> float:
    """
    The nearest-rank C{p}th percentile of C{values}.
    """
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def print_table(title: str, header: tuple, rows: list[tuple]) -> None:
    """
    Print C{rows} (tuples of strings) under C{header}, columns aligned.
    """
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    print(title)
    for row in [header, *rows]:
        print("  ".join(str(v).ljust(w) for v, w in zip(row, widths)).rstrip())


def run_main(main, worker_roles: dict) -> None:
    """
    C{script role args...} runs a worker role; anything else runs
    C{main(reactor, *argv)} under task.react, killing
    every child at shutdown (also at Ctrl-C).
    """
    role = worker_roles.get(sys.argv[1]) if len(sys.argv) > 1 else None
    if role is not None:
        task.react(lambda reactor: defer.Deferred.fromCoroutine(role(reactor, *sys.argv[2:])))
        return

    async def wrapped(reactor):
        trigger = reactor.addSystemEventTrigger("before", "shutdown", kill_all, reactor)
        try:
            await main(reactor, *sys.argv[1:])
        finally:
            try:
                reactor.removeSystemEventTrigger(trigger)
            except ValueError:
                pass
            await kill_all(reactor)

    task.react(lambda reactor: defer.Deferred.fromCoroutine(wrapped(reactor)))


def remove_tree(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)
