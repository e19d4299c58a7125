"""
The local lab: run a mesh of routers on 127.0.0.1 and watch it.

C{python -m meshroute.lab etc/lab} (what C{make lab} runs) starts one
C{twistd -n meshroute} per C{*.toml} in the directory, prints the links as
they reach delivery, then plays a short fault scenario so a newcomer sees
the routing-link rules at work:

 1. every link reaches delivery (connect → authentication → recovery →
    delivery);
 2. one router is frozen with SIGSTOP: its neighbours' keepalive counters
    run down and they close their links to it with reason C{keepalive};
 3. it is resumed with SIGCONT: its links come back to delivery.

Then it keeps reporting every event until Ctrl-C, which stops every
router with SIGTERM (links close with reason C{shutdown}).
"""

import argparse
import glob
import json
import os
import signal
import subprocess
import sys
import time
import tomllib
import urllib.request

from meshroute.cli import format_links

#: twistd from the running interpreter's environment.
TWISTD = [sys.executable, "-c", "import sys; from twisted.scripts.twistd import run; sys.exit(run())"]


class LabRouter:
    """
    One router process of the lab and the files it writes.
    """

    def __init__(self, config_path: str, log_dir: str) -> None:
        with open(config_path, "rb") as f:
            config = tomllib.load(f)
        self.config_path = config_path
        self.name = config["router"]["name"]
        self.events_path = os.path.join(config["router"]["data-dir"], "events.jsonl")
        endpoint = config.get("admin", {}).get("endpoint", "")
        port = endpoint.split(":")[1] if endpoint.startswith("tcp:") else None
        self.admin = f"http://127.0.0.1:{port}" if port else None
        self.log_path = os.path.join(log_dir, f"{self.name}.log")
        self.process: subprocess.Popen | None = None
        self._events_offset = os.path.getsize(self.events_path) if os.path.exists(
            self.events_path) else 0

    def start(self) -> None:
        self.process = subprocess.Popen(
            [*TWISTD, "-n", "--pidfile=", f"--logfile={self.log_path}",
             "meshroute", "--config", self.config_path],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def new_events(self) -> list[dict]:
        """
        Events appended since the last call.
        """
        if not os.path.exists(self.events_path):
            return []
        with open(self.events_path, encoding="utf-8") as f:
            f.seek(self._events_offset)
            lines = f.readlines()
            if lines and not lines[-1].endswith("\n"):
                lines.pop()
            self._events_offset += sum(len(line.encode()) for line in lines)
        return [json.loads(line) for line in lines]

    def links(self) -> list[dict]:
        with urllib.request.urlopen(self.admin + "/api/v1/links", timeout=2) as response:
            return json.load(response)

    def status(self) -> str:
        with urllib.request.urlopen(self.admin + "/api/v1/router", timeout=2) as response:
            router = json.load(response)
        return format_links(router, self.links())


def describe(event: dict) -> str | None:
    """
    One line for a person, or None for events not worth a line.
    """
    stamp = time.strftime("%H:%M:%S", time.localtime(event["time"]))
    who = f"{stamp} {event['router']:<9}"
    name = event["event"]
    peer = event.get("peer") or "?"
    if name == "link.stage":
        return f"{who} link {event['link']:<14} {event['direction']:<9} {peer:<9} → {event['stage']}"
    if name == "link.rejected":
        by = "refused" if event["by"] == "local" else "refused by peer"
        return f"{who} link {event['link']:<14} {event['direction']:<9} {peer:<9} {by}: {event['code']}"
    if name == "link.closed":
        return (f"{who} link {event['link']:<14} {event['direction']:<9} {peer:<9} closed "
                f"in {event['stage']}: {event['reason']}")
    if name.startswith("router."):
        return f"{who} {name}"
    return f"{who} {name} {json.dumps(event)}"


class Lab:
    def __init__(self, routers: list[LabRouter]) -> None:
        self.routers = routers

    def report(self) -> None:
        lines = [(e["time"], describe(e)) for r in self.routers for e in r.new_events()]
        for _, line in sorted(lines):
            print(line, flush=True)

    def watch(self, seconds: float, until=None) -> bool:
        """
        Report events for up to C{seconds}; stop early once C{until()}.
        """
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.report()
            self.check_alive()
            if until is not None and until():
                self.report()
                return True
            time.sleep(0.2)
        return False

    def check_alive(self) -> None:
        for router in self.routers:
            if router.process.poll() is not None:
                error = router.process.stderr.read().decode(errors="replace")
                raise SystemExit(
                    f"{router.name} exited with status {router.process.returncode}:\n{error}"
                    f"(see {router.log_path})"
                )

    def all_in_delivery(self, expected: int) -> bool:
        try:
            links = [link for router in self.routers for link in router.links()]
        except OSError:
            return False
        return len(links) == expected and all(link["stage"] == "delivery" for link in links)

    def print_status(self) -> None:
        print()
        for router in self.routers:
            print(router.status(), end="")
        print(flush=True)

    def stop(self) -> None:
        for router in self.routers:
            if router.process and router.process.poll() is None:
                router.process.send_signal(signal.SIGCONT)
                router.process.terminate()
        for router in self.routers:
            if router.process:
                try:
                    code = router.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    router.process.kill()
                    code = router.process.wait()
                print(f"{router.name} stopped (exit status {code})")
        self.report()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", help="directory of router configurations (*.toml)")
    parser.add_argument("--duration", type=float, default=None,
                        help="stop after this many seconds instead of waiting for Ctrl-C")
    args = parser.parse_args(argv)
    paths = sorted(glob.glob(os.path.join(args.directory, "*.toml")))
    if len(paths) < 2:
        raise SystemExit(f"{args.directory}: need at least two router configurations")
    log_dir = os.path.join("var", "lab")
    os.makedirs(log_dir, exist_ok=True)
    lab = Lab([LabRouter(path, log_dir) for path in paths])
    expected_links = 2 * sum(
        len(tomllib.load(open(path, "rb")).get("routing", {}).get("connector", []))
        for path in paths
    )
    print(f"meshroute lab: starting {len(paths)} routers from {args.directory}")
    for router in lab.routers:
        print(f"  {router.name:<10} admin API {router.admin}/api/v1/links   log {router.log_path}")
        router.start()
    started = time.monotonic()
    try:
        print("\n== 1. the mesh comes up: every link passes the four stages")
        if not lab.watch(30, until=lambda: lab.all_in_delivery(expected_links)):
            print("not every link reached delivery in 30 s; see the logs above")
        lab.print_status()
        victim = lab.routers[len(lab.routers) // 2]
        print(f"== 2. freezing {victim.name} with SIGSTOP: its neighbours stop hearing "
              "keepalives and close their links after five intervals")
        victim.process.send_signal(signal.SIGSTOP)
        lab.watch(8)
        print(f"\n== 3. resuming {victim.name} with SIGCONT: it reconnects")
        victim.process.send_signal(signal.SIGCONT)
        lab.watch(20, until=lambda: lab.all_in_delivery(expected_links))
        lab.print_status()
        print("== the mesh runs; events appear as they happen. Ctrl-C stops every router.")
        remaining = None if args.duration is None else args.duration - (time.monotonic() - started)
        while remaining is None or remaining > 0:
            lab.watch(1 if remaining is None else min(1, remaining))
            if remaining is not None:
                remaining = args.duration - (time.monotonic() - started)
    except KeyboardInterrupt:
        print("\nCtrl-C: stopping the lab")
    finally:
        lab.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
