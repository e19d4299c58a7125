"""
How routing grows with the size of the mesh, by simulation.

    python benchmarks/mesh_scale.py [--sizes 25,50,100,200] [--seed 1]

For each size N, a random connected mesh of N routers with 3 or 4 links
each (seeded: a ring, a chord from every router, a second chord from
some) runs on the in-memory mesh (L{meshroute.testing.memory_mesh}: real
L{RouterService}s over in-memory transports, one virtual clock), each
size in its own process so that its memory is its own.  It measures:

 - B{convergence}, in virtual time: the network is stepped one one-way
   delay (C{--delay-ms}, 1 ms) at a time (L{MemoryNetwork.step}), and the
   mesh has converged once every router holds every other router's
   current advertisement (the link-state database is the same
   everywhere, so every route table computes the same graph).  After
   start: every router starts at once, isolated, and is let onto the
   network together; after a link failure: one link, whose loss leaves
   the mesh connected, is closed by stopping its connector;
 - B{advertisement bytes} (C{Routes} frames on the wire) per router: to
   converge at start, then per minute at rest (the minute after) and in
   the minute that follows the link failure (the routes of the failure
   and of its repair, once the connector is started again);
 - B{route CPU} (real CPU time, C{time.process_time}) spent in the route
   table and the engine's route handling (C{Forwarding.link_up},
   C{link_down}, C{routes_received}, C{routes_changed}, and the route
   table's questions from anywhere else), per router, for the start and
   for the failure; and how many route computations (breadth-first
   searches) ran, per router;
 - B{memory} per router: the process's RSS growth while the mesh was
   built and converged, divided by N (routers and their SQLite stores).

Then it checks every router's routes against the live graph (hops equal
to the shortest distance, the next hop a neighbour one hop closer) and
prints one table, and how each column grows per doubling of N (the ratio
from one size to the next, and the exponent k of a fit ~ N^k).  Route
CPU and memory are real measurements: noisy on a shared machine; compare
within one run.
"""

import argparse
import gc
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from meshroute.router.forwarding import Forwarding  # noqa: E402
from meshroute.link import core  # noqa: E402
from meshroute.testing.memory_mesh import MemoryMesh  # noqa: E402
from meshroute.routing.table import RouteTable  # noqa: E402
from meshroute.wire.frames import Routes  # noqa: E402

#: Far longer than any convergence: no keepalive traffic interferes.
KEEPALIVE_MS = 10_000
#: A connector retries this soon: every router joins at the first step.
RETRY_MS = 1
#: Steps without convergence after which a run is declared stuck.
MAX_STEPS = 10_000


def random_mesh(n: int, seed: int) -> list[tuple[int, int]]:
    """
    The links of a connected mesh of C{n} routers, each with 3 or 4: a
    ring in random order, a chord from every router to a random one of
    degree below 3, then, from half of them, another chord between
    routers of degree below 4.
    """
    rng = random.Random(seed * 1_000_003 + n)
    order = list(range(n))
    rng.shuffle(order)
    links = {tuple(sorted((order[i], order[(i + 1) % n]))) for i in range(n)}
    degree = [2] * n

    def chord(a: int, below: int) -> None:
        candidates = [b for b in range(n) if b != a and degree[b] < below
                      and tuple(sorted((a, b))) not in links]
        if candidates:
            b = rng.choice(candidates)
            links.add(tuple(sorted((a, b))))
            degree[a] += 1
            degree[b] += 1

    for a in rng.sample(range(n), n):
        if degree[a] < 3:
            chord(a, 3)
    for a in rng.sample(range(n), n // 2):
        if degree[a] < 4:
            chord(a, 4)
    return sorted(links)


class RouteMeter:
    """
    Counts what routing costs: CPU time in the route-handling methods
    (the outermost call only, so nested ones are not counted twice),
    route computations, and the bytes of C{Routes} frames written.
    """

    TIMED = [(Forwarding, "link_up"), (Forwarding, "link_down"),
             (Forwarding, "routes_received"), (Forwarding, "routes_changed"),
             (RouteTable, "routes"), (RouteTable, "next_hop")]

    def __init__(self) -> None:
        self.cpu = 0.0
        self.computations = 0
        self.bytes = 0
        self.frames = 0
        self._depth = 0

    def install(self) -> None:
        for cls, name in self.TIMED:
            if name in vars(cls):
                setattr(cls, name, self._timed(getattr(cls, name)))
        compute = RouteTable._compute

        def counted(table):
            self.computations += 1
            return compute(table)

        RouteTable._compute = counted
        encode = core.encode

        def measured(frame):
            data = encode(frame)
            if type(frame) is Routes:
                self.bytes += len(data)
                self.frames += 1
            return data

        core.encode = measured

    def _timed(self, method):
        def timed(*args, **kwargs):
            if self._depth:
                return method(*args, **kwargs)
            self._depth += 1
            started = time.process_time()
            try:
                return method(*args, **kwargs)
            finally:
                self.cpu += time.process_time() - started
                self._depth -= 1
        return timed

    def reading(self) -> tuple[float, int, int, int]:
        return self.cpu, self.computations, self.bytes, self.frames


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def converged(mesh: MemoryMesh) -> bool:
    """
    Whether every router holds every other router's current
    advertisement.
    """
    current = {name: router.engine.routes.own for name, router in mesh.routers.items()}
    for router in mesh.routers.values():
        held = router.engine.routes.advertisements()
        if len(held) != len(current) or any(current[a.origin] != a for a in held):
            return False
    return True


def step_until_converged(mesh: MemoryMesh, delay_s: float) -> float:
    """
    Step the network one delay at a time (timers due by then fire first)
    until the mesh converges, then let what is still on its way (copies
    of advertisements every router already holds) arrive, without
    moving time, so that it is counted with the change; and ask every
    router its routes once, as the first message it forwards after the
    change does (a router with nothing to forward computes none).

    @return: the virtual seconds it took to converge.
    """
    start = mesh.clock.seconds()
    for _ in range(MAX_STEPS):
        mesh.clock.advance(delay_s)
        mesh.network.step()
        if converged(mesh):
            took = mesh.clock.seconds() - start
            mesh.run(0)
            for router in mesh.routers.values():
                router.engine.routes.routes()
            return took
    raise RuntimeError(f"no convergence within {MAX_STEPS} steps")


def check_routes(mesh: MemoryMesh, links: set[tuple[str, str]]) -> None:
    """
    Every router's routes follow shortest paths of the live graph.
    """
    adjacent: dict[str, set[str]] = {name: set() for name in mesh.routers}
    for a, b in links:
        adjacent[a].add(b)
        adjacent[b].add(a)
    for name, router in mesh.routers.items():
        distance = {name: 0}
        queue = deque([name])
        while queue:
            here = queue.popleft()
            for there in adjacent[here]:
                if there not in distance:
                    distance[there] = distance[here] + 1
                    queue.append(there)
        routes = router.engine.routes.routes()
        assert set(routes) == set(distance) - {name}, f"{name} misses routes"
        for dest, (hop, hops) in routes.items():
            assert hops == distance[dest], f"{name} → {dest}: {hops} hops, not {distance[dest]}"
            assert hop in adjacent[name], f"{name} → {dest} via {hop}, not a neighbour"


def connector(router, peer: str):
    return router.getServiceNamed(f"connector:{peer}")


def run_one(n: int, seed: int, delay_ms: float) -> dict:
    """
    Build, converge, wait, fail a link, converge, repair, wait: one size.
    """
    delay_s = delay_ms / 1000
    names = [f"r{i:03d}" for i in range(n)]
    links = random_mesh(n, seed)
    connect_to = {name: [] for name in names}
    for a, b in links:
        connect_to[names[a]].append(names[b])
    meter = RouteMeter()
    meter.install()
    gc.collect()
    rss_before = rss_kib()
    with tempfile.TemporaryDirectory(prefix="mesh-scale-") as root:
        mesh = MemoryMesh(Path(root), keepalive_interval_ms=KEEPALIVE_MS,
                          stage_valid_timeout_ms=KEEPALIVE_MS, retry_interval_ms=RETRY_MS)
        # Every router starts isolated (its connections refused), then
        # all are let onto the network at the same instant.
        mesh.network.partitioned.update(names)
        for name in names:
            mesh.add(name, connect_to[name])
        mesh.network.partitioned.clear()

        result = {"n": n, "links": len(links)}
        before = meter.reading()
        result["start_s"] = step_until_converged(mesh, delay_s)
        after = meter.reading()
        result["start_cpu_ms"] = (after[0] - before[0]) * 1000 / n
        result["start_computations"] = (after[1] - before[1]) / n
        result["start_bytes"] = (after[2] - before[2]) / n
        live = {(names[a], names[b]) for a, b in links}
        check_routes(mesh, live)
        gc.collect()
        result["rss_kib"] = (rss_kib() - rss_before) / n

        before = meter.reading()
        mesh.run(60)
        result["rest_bytes_min"] = (meter.reading()[2] - before[2]) / n

        # A link whose loss leaves the mesh connected: any link of the
        # ring's chords would do; take a seeded one and check.
        rng = random.Random(seed)
        for a, b in rng.sample(links, len(links)):
            others = live - {(names[a], names[b])}
            reach, queue = {names[0]}, deque([names[0]])
            while queue:
                here = queue.popleft()
                for x, y in others:
                    for there in ((y,) if x == here else (x,) if y == here else ()):
                        if there not in reach:
                            reach.add(there)
                            queue.append(there)
            if len(reach) == n:
                break
        failed = connector(mesh.routers[names[a]], names[b])
        before = meter.reading()
        failed.stopService()
        result["failure_s"] = step_until_converged(mesh, delay_s)
        after = meter.reading()
        result["failure_cpu_ms"] = (after[0] - before[0]) * 1000 / n
        result["failure_computations"] = (after[1] - before[1]) / n
        result["failure_bytes"] = (after[2] - before[2]) / n
        check_routes(mesh, others)
        failed.startService()
        mesh.run(60)
        result["change_bytes_min"] = (meter.reading()[2] - before[2]) / n
        check_routes(mesh, live)
        mesh.stop_all()
    return result


COLUMNS = [
    ("n", "routers", "{:.0f}"),
    ("links", "links", "{:.0f}"),
    ("start_s", "converge start ms", "{:.0f}"),
    ("failure_s", "converge failure ms", "{:.0f}"),
    ("start_bytes", "adv B/router start", "{:.0f}"),
    ("rest_bytes_min", "adv B/router/min rest", "{:.0f}"),
    ("change_bytes_min", "adv B/router/min change", "{:.0f}"),
    ("start_cpu_ms", "route CPU ms/router start", "{:.2f}"),
    ("failure_cpu_ms", "route CPU ms/router failure", "{:.3f}"),
    ("start_computations", "BFS/router start", "{:.1f}"),
    ("failure_computations", "BFS/router failure", "{:.1f}"),
    ("rss_kib", "RSS KiB/router", "{:.0f}"),
]


def table(results: list[dict]) -> str:
    rows = [[title for _, title, _ in COLUMNS]]
    for r in results:
        rows.append([fmt.format(r[key] * (1000 if key.endswith("_s") else 1))
                     for key, _, fmt in COLUMNS])
    growth = ["growth per doubling"] + [""] * (len(COLUMNS) - 1)
    exponent = ["fit ~ N^k"] + [""] * (len(COLUMNS) - 1)
    for column, (key, _, _) in enumerate(COLUMNS):
        if column == 0:
            continue
        values = [r[key] for r in results]
        ratios = [b / a for a, b in zip(values, values[1:]) if a > 0]
        if ratios:
            growth[column] = " ".join(f"{x:.2f}" for x in ratios)
        points = [(math.log(r["n"]), math.log(r[key])) for r in results if r[key] > 0]
        if len(points) >= 2:
            mx = sum(x for x, _ in points) / len(points)
            my = sum(y for _, y in points) / len(points)
            slope = (sum((x - mx) * (y - my) for x, y in points)
                     / sum((x - mx) ** 2 for x, _ in points))
            exponent[column] = f"k={slope:.2f}"
    rows += [growth, exponent]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = []
    for i, row in enumerate(rows):
        lines.append(" | ".join(cell.rjust(w) for cell, w in zip(row, widths)))
        if i == 0:
            lines.append("-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="25,50,100,200")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--delay-ms", type=float, default=1.0,
                        help="one-way delay of every link, in virtual time")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.one:
        print(json.dumps(run_one(options.one, options.seed, options.delay_ms)))
        return
    results = []
    for n in (int(size) for size in options.sizes.split(",")):
        done = subprocess.run(
            [sys.executable, __file__, "--one", str(n), "--seed", str(options.seed),
             "--delay-ms", str(options.delay_ms)],
            check=True, stdout=subprocess.PIPE, text=True)
        results.append(json.loads(done.stdout.splitlines()[-1]))
        print(f"N={n} done", file=sys.stderr)
    print(f"seed {options.seed}, one-way delay {options.delay_ms} ms (virtual)")
    print(table(results))


if __name__ == "__main__":
    main()
