"""
Routing-link handshake latency and idle-link cost, on loopback.

Starts one real router (twistd; routing listener and admin API on free
ports) and opens N links to it from this process with the real connector
code: a L{RouterContext} per connector name (bench-000, bench-001, ...) and
a L{ConnectorFactory} whose C{on_delivery} notes the time.  It measures the
handshake one link at a time (latency), then with all N started at once
(queueing), then holds the N links idle and reads the router's RSS and CPU
from /proc.  See benchmarks/README.md.
"""

import json
import math
import os
import statistics
import sys
import tempfile
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import ProcessExited as RouterExited  # noqa: E402
from _harness import free_port, poll  # noqa: E402

from twisted.internet import defer, protocol, task  # noqa: E402
from twisted.internet.endpoints import TCP4ClientEndpoint, clientFromString  # noqa: E402
from twisted.python import usage  # noqa: E402
from twisted.web.client import Agent, readBody  # noqa: E402
from zope.interface import implementer  # noqa: E402

from meshroute.events import EventLog  # noqa: E402
from meshroute.link.context import RouterContext  # noqa: E402
from meshroute.link.settings import ConnectorSettings  # noqa: E402
from meshroute.link.stages import DELIVERY  # noqa: E402
from meshroute.interfaces import ILinkChannel, ILinkEngine  # noqa: E402
from meshroute.link.link import ConnectorFactory  # noqa: E402
from meshroute.link.registry import LinkRegistry  # noqa: E402
from meshroute.wire.frames import Recovery  # noqa: E402

# readBody warns when a short response is complete before it is read
# (Twisted's own transport proxy lacks abortConnection); that is harmless.
warnings.filterwarnings("ignore", "Using readBody with a transport", DeprecationWarning)

ROUTER = "bench-router"
SECRET = b"benchmark secret"
#: The longest we wait for any one thing (the router starting, a handshake).
DEADLINE_S = 30.0
#: The router's configuration; its paths are relative to its working directory.
CONFIG = """\
[router]
name = "{router}"
data-dir = "router"
[routing.listener]
endpoint = "tcp:{port}:interface=127.0.0.1"
keepalive-interval = {keepalive}
password-file = "secret"
[admin]
endpoint = "tcp:{admin_port}:interface=127.0.0.1"
"""


class Options(usage.Options):
    optParameters = [
        ["links", None, 200, "Number of links (connector names bench-000...).", int],
        ["hold", None, 60.0, "Seconds to hold the idle links.", float],
        ["keepalive", None, 60000, "The router's keepalive-interval, in ms.", int],
    ]

    def postOptions(self) -> None:
        if not 1 <= self["links"] <= 1000:
            raise usage.UsageError("--links must be between 1 and 1000")
        if self["hold"] <= 0 or self["keepalive"] < 10:
            raise usage.UsageError("--hold must be positive and --keepalive at least 10")


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


@implementer(ILinkChannel)
class _IdleChannel:
    """
    The connector side's delivery stage: these links carry no messages.
    """

    def recovered(self, frame) -> None:
        pass

    def transferred(self, frame) -> None:
        raise RuntimeError("no messages flow on benchmark links")

    acknowledged = fast_transferred = transferred

    def routes(self, frame) -> None:
        pass

    def closed(self) -> None:
        pass


@implementer(ILinkEngine)
class IdleEngine:
    """
    What each benchmark connector needs from a message engine: a recovery
    point (nothing received) and a channel for its idle link.
    """

    def recovery(self, peer: str) -> Recovery:
        return Recovery(0)

    def link_up(self, peer: str, send, fail, emit, version: int) -> _IdleChannel:
        return _IdleChannel()


class Router(protocol.ProcessProtocol):
    """
    The router under test: C{twistd -n meshroute} in a work directory, with
    this checkout first on its path.  C{ended} fires with its exit code.

    Its admin API is read with an L{Agent} that connects without name
    resolution, which would start a thread pool in this process; with a
    second thread, each growth of the fd table waits for an RCU grace
    period, a 10-40 ms stall in the middle of some handshake.
    """

    def __init__(self, reactor, workdir: str, keepalive_ms: int) -> None:
        self._reactor = reactor
        self.ended, self.output = defer.Deferred(), b""
        self.port, self._admin_port = free_port(), free_port()
        self._agent = Agent.usingEndpointFactory(reactor, self)
        with open(os.path.join(workdir, "secret"), "wb") as f:
            f.write(SECRET)
        with open(os.path.join(workdir, "router.toml"), "w") as f:
            f.write(CONFIG.format(router=ROUTER, port=self.port, admin_port=self._admin_port,
                                  keepalive=keepalive_ms))
        pythonpath = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
        argv = [sys.executable, "-c", "from twisted.scripts.twistd import run; run()", "-n",
                "--pidfile=", "--logfile=router.log", "meshroute", "--config", "router.toml"]
        self.process = reactor.spawnProcess(self, sys.executable, argv, path=workdir,
                                            env=dict(os.environ, PYTHONPATH=pythonpath))

    def childDataReceived(self, fd: int, data: bytes) -> None:
        self.output += data

    def processEnded(self, reason) -> None:
        self.ended.callback(reason.value.exitCode)

    def endpointForURI(self, uri):
        return TCP4ClientEndpoint(self._reactor, "127.0.0.1", self._admin_port)

    def check_alive(self) -> None:
        if self.ended.called:
            raise RouterExited(f"the router exited:\n{self.output.decode()}")

    async def get(self, path: str):
        self.check_alive()
        url = f"http://127.0.0.1:{self._admin_port}/api/v1/{path}"
        return json.loads(await readBody(await self._agent.request(b"GET", url.encode())))

    async def links_in_delivery(self) -> int:
        return sum(1 for link in await self.get("links") if link["stage"] == DELIVERY)

    def usage(self) -> tuple[int, float]:
        """Its RSS (KiB) and CPU time (utime + stime, seconds)."""
        self.check_alive()
        with open(f"/proc/{self.process.pid}/status") as f:
            rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        with open(f"/proc/{self.process.pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
        return rss, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Connectors:
    """
    The connector side: one context (event log, registry, ledger) per bench
    router name, since a context is one router and a registry holds one
    link per peer.
    """

    def __init__(self, reactor, workdir: str, count: int, port: int) -> None:
        self._reactor = reactor
        self._endpoint = clientFromString(reactor, f"tcp:127.0.0.1:{port}")
        self._settings = ConnectorSettings(SECRET, expected_peer=ROUTER, stage_valid_timeout_ms=15000)
        names = [f"bench-{i:03d}" for i in range(count)]
        self.contexts = [
            RouterContext(name, reactor, EventLog(os.path.join(workdir, name), name, reactor), LinkRegistry(), IdleEngine())
            for name in names
        ]

    async def handshake(self, context: RouterContext) -> tuple[float, float]:
        """
        Open one link.  Returns ms from starting the connect to the
        connection being made (Hello sent), and to the delivery stage.
        """
        reached = defer.Deferred()

        def on_delivery() -> None:
            # Take the time inside the machine's transition; resume the
            # benchmark outside it.
            now = time.perf_counter()
            self._reactor.callLater(0, lambda: reached.called or reached.callback(now))

        start = time.perf_counter()
        await self._endpoint.connect(ConnectorFactory(context, self._settings, on_delivery))
        connected = time.perf_counter()
        delivered = await reached.addTimeout(DEADLINE_S, self._reactor)
        return (connected - start) * 1000, (delivered - start) * 1000

    def close_all(self) -> defer.Deferred:
        return defer.gatherResults([c.registry.close_all() for c in self.contexts])


def latency_rows(label: str, times: list[tuple[float, float]]) -> list[tuple[str, str]]:
    values = [delivered for _, delivered in times]
    return [
        (f"connected, {label}, median", f"{statistics.median(c for c, _ in times):.2f} ms"),
        (f"handshake, {label}, median", f"{statistics.median(values):.2f} ms"),
        (f"handshake, {label}, p90", f"{percentile(values, 90):.2f} ms"),
        (f"handshake, {label}, p99", f"{percentile(values, 99):.2f} ms"),
        (f"handshake, {label}, max", f"{max(values):.2f} ms"),
    ]


async def run(reactor, options: Options, workdir: str) -> list[tuple[str, str]]:
    n = options["links"]
    router = Router(reactor, workdir, options["keepalive"])
    connectors = Connectors(reactor, workdir, n, router.port)
    try:
        await poll(reactor, "the router's admin API", lambda: router.get("router"))
        rss_before, cpu_before = router.usage()

        sequential = [await connectors.handshake(c) for c in connectors.contexts]
        handshake_cpu_ms = (router.usage()[1] - cpu_before) * 1000 / n
        await connectors.close_all()
        await poll(reactor, "the router to drop the sequential links",
                   lambda: router.get("links"), lambda links: not links)

        start = time.perf_counter()
        concurrent = await defer.gatherResults(
            [defer.Deferred.fromCoroutine(connectors.handshake(c)) for c in connectors.contexts])
        total_ms = (time.perf_counter() - start) * 1000
        await poll(reactor, f"{n} router links in delivery",
                   router.links_in_delivery, lambda count: count == n)

        (_, cpu_start), hold_start = router.usage(), time.monotonic()
        await task.deferLater(reactor, options["hold"])
        rss_links, cpu_end = router.usage()
        cpu_ms, held_s = (cpu_end - cpu_start) * 1000, time.monotonic() - hold_start
        in_delivery = await router.links_in_delivery()
        if in_delivery != n:
            raise RuntimeError(f"after the hold, {in_delivery} of {n} links are in delivery")

        router.process.signalProcess("TERM")
        code = await router.ended.addTimeout(DEADLINE_S, reactor)
        if code != 0:
            raise RuntimeError(f"router exited {code} on SIGTERM:\n{router.output.decode()}")
        return [
            *latency_rows("sequential", sequential),
            *latency_rows("concurrent", concurrent),
            (f"all {n} concurrent in delivery", f"{total_ms:.1f} ms"),
            ("router CPU per handshake (sequential)", f"{handshake_cpu_ms:.2f} ms"),
            ("router RSS, no links", f"{rss_before} KiB"),
            (f"router RSS, {n} idle links", f"{rss_links} KiB"),
            ("memory per idle link", f"{(rss_links - rss_before) / n:.1f} KiB"),
            (f"router CPU during {held_s:.0f} s hold", f"{cpu_ms:.0f} ms"),
            ("CPU per idle link per minute", f"{cpu_ms / n / (held_s / 60):.3f} ms"),
            ("admin API: links in delivery", str(in_delivery)),
            ("router exit status on SIGTERM", str(code)),
        ]
    finally:
        if not router.ended.called:
            router.process.signalProcess("KILL")
            await router.ended
        await connectors.close_all()
        for context in connectors.contexts:
            context.events.close()


async def main(reactor, *argv: str) -> None:
    options = Options()
    try:
        options.parseOptions(argv)
    except usage.UsageError as e:
        raise SystemExit(f"{e}\n{options}")
    with tempfile.TemporaryDirectory(prefix="meshroute-bench-") as workdir:
        rows = await run(reactor, options, workdir)
    print(f"meshroute handshake benchmark ({options['links']} links, "
          f"keepalive {options['keepalive']} ms, hold {options['hold']:g} s)")
    width = max(len(label) for label, _ in rows) + 3
    print(f"{'metric':<{width}}value")
    for label, value in rows:
        print(f"{label:<{width}}{value}")


if __name__ == "__main__":
    task.react(lambda reactor: defer.Deferred.fromCoroutine(main(reactor, *sys.argv[1:])))
