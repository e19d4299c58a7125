"""
The local lab: run a mesh of routers on 127.0.0.1 and watch it.

C{python -m meshroute.lab etc/lab} (what C{make lab} runs) starts one
C{twistd -n meshroute} per C{*.toml} in the directory, prints the links as
they reach delivery, then plays a short scenario so a newcomer sees the
mesh at work, with producers and consumers as separate processes
(C{meshroute send} and C{meshroute receive}):

 1. every link reaches delivery (connect → authentication → recovery →
    delivery);
 2. traffic: messages sent at the first router to a queue on the last one
    arrive there, each exactly once;
 3. the middle router is frozen with SIGSTOP: its neighbours' keepalive
    counters run down and they close their links to it with reason
    C{keepalive}; messages sent to it meanwhile wait in the sender's
    store;
 4. it is resumed with SIGCONT: its links come back to delivery, the
    waiting messages flow, and its consumer gets each exactly once.

Then it keeps reporting link events until Ctrl-C, which stops every
router with SIGTERM (links close with reason C{shutdown}), and ends by
auditing the routers' event logs (C{python -m meshroute.audit}, into
C{var/lab/audit}) and printing the audit's summary.
"""

import argparse
import collections
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
        endpoint = config.get("clients", {}).get("listener", {}).get("endpoint", "")
        port = endpoint.split(":")[1] if endpoint.startswith("tcp:") else None
        self.clients = f"tcp:127.0.0.1:{port}" if port else None
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

    def router_info(self) -> dict:
        with urllib.request.urlopen(self.admin + "/api/v1/router", timeout=2) as response:
            return json.load(response)

    def status(self) -> str:
        return format_links(self.router_info(), self.links())


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
    if name.startswith("message."):
        return None  # counted, not printed: there are thousands
    return f"{who} {name} {json.dumps(event)}"


def meshroute_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "meshroute.cli", *args]


class Consumer:
    """
    A C{meshroute receive} process, started before the messages are sent.
    """

    def __init__(self, router: LabRouter, queue: str, count: int) -> None:
        self.description = f"{queue} on {router.name}"
        self.count = count
        self.process = subprocess.Popen(
            meshroute_command("receive", "--connect", router.clients, "--queue", queue,
                              "--count", str(count), "--timeout", "60", "--json"),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )

    def report(self) -> None:
        out, err = self.process.communicate(timeout=90)
        ids = [json.loads(line)["id"] for line in out.splitlines() if line.strip()]
        verdict = "each exactly once" if len(set(ids)) == len(ids) == self.count else (
            f"{len(set(ids))} distinct, {len(ids) - len(set(ids))} doubled; {err.strip()}")
        print(f"   consumer of {self.description}: received {len(ids)} of "
              f"{self.count}, {verdict}", flush=True)


def send(router: LabRouter, address: str, count: int, label: str) -> None:
    result = subprocess.run(
        meshroute_command("send", "--connect", router.clients, "--to", address,
                          "--count", str(count), "--body", label),
        capture_output=True, text=True, timeout=120,
    )
    status = "durably accepted" if result.returncode == 0 else f"FAILED: {result.stderr.strip()}"
    print(f"   meshroute send: {count} messages to {address} at {router.name}: {status}",
          flush=True)


class Lab:
    def __init__(self, routers: list[LabRouter]) -> None:
        self.routers = routers
        self.message_counts: collections.Counter = collections.Counter()

    def report(self) -> None:
        lines = []
        for router in self.routers:
            for event in router.new_events():
                if event["event"].startswith("message."):
                    self.message_counts[event["router"], event["event"]] += 1
                line = describe(event)
                if line is not None:
                    lines.append((event["time"], line))
        for _, line in sorted(lines):
            print(line, flush=True)

    def print_message_counts(self) -> None:
        """
        What the event logs say happened to messages so far.
        """
        self.report()
        for router in self.routers:
            counts = {event.split(".", 1)[1]: n for (name, event), n
                      in sorted(self.message_counts.items()) if name == router.name}
            if counts:
                listed = ", ".join(f"{what} {n}" for what, n in counts.items())
                print(f"   {router.name} event log: messages {listed}", flush=True)

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


def run_audit(routers: list[LabRouter], out: str) -> None:
    """
    Audit the lab's event logs with the PySpark job and print its summary;
    say so and skip when pyspark or Java is missing.
    """
    import importlib.util
    import shutil

    print(f"\n== the audit: what the event logs prove (report in {out}/report.html)", flush=True)
    if importlib.util.find_spec("pyspark") is None:
        print("   audit skipped: pyspark is not installed (pip install 'meshroute[audit]')")
        return
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        print("   audit skipped: Spark needs Java, and no java is on the PATH")
        return
    paths = [router.events_path for router in routers if os.path.exists(router.events_path)]
    if not paths:
        print("   audit skipped: no event log was written")
        return
    try:
        result = subprocess.run([sys.executable, "-m", "meshroute.audit", *paths, "--out", out])
    except KeyboardInterrupt:
        print("\naudit interrupted")
        return
    verdict = {0: "the mesh kept its promises", 2: "the mesh broke a promise (see above)"}
    print(f"   audit exit status {result.returncode}: "
          f"{verdict.get(result.returncode, 'the audit failed')}", flush=True)


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
        first, victim, last = lab.routers[0], lab.routers[len(lab.routers) // 2], lab.routers[-1]

        print(f"== 2. traffic: 1000 messages from {first.name} to orders@{last.name}")
        consumer = Consumer(last, "orders", 1000)
        send(first, f"orders@{last.name}", 1000, "lab traffic")
        consumer.report()
        lab.print_message_counts()

        print(f"\n== 3. freezing {victim.name} with SIGSTOP: its neighbours stop hearing "
              "keepalives and close their links after about five intervals")
        victim.process.send_signal(signal.SIGSTOP)
        lab.watch(15, until=lambda: not any(link["peer"] == victim.name
                                            for link in first.links()))
        send(first, f"inbox@{victim.name}", 500, "sent while frozen")
        backlog = first.router_info().get("backlog", {})
        print(f"   {first.name} holds them in its store: backlog {backlog}", flush=True)

        print(f"\n== 4. resuming {victim.name} with SIGCONT: it reconnects and the "
              "waiting messages flow")
        victim.process.send_signal(signal.SIGCONT)
        lab.watch(20, until=lambda: lab.all_in_delivery(expected_links))
        Consumer(victim, "inbox", 500).report()
        lab.print_message_counts()
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
    run_audit(lab.routers, os.path.join(log_dir, "audit"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
