"""
The local lab: run a mesh of routers on 127.0.0.1 and watch it.

C{python -m meshroute.lab etc/lab} (what C{make lab} runs) starts one
C{twistd -n meshroute} per C{*.toml} in the directory (the two instances
of an HA pair are two files with the same router name; a file's
C{[[ha.colocated]]} entries name more files, in C{etc/lab/hosted/}, whose
instances its process runs beside its router), prints the links as they
reach delivery, then plays a short scenario so a newcomer sees the mesh
at work, with producers and consumers as separate processes
(C{meshroute send} and C{meshroute receive}):

 1. every link reaches delivery (connect → authentication → recovery →
    delivery), and each pair elects its active instance, which
    replicates to the other;
 2. traffic: messages sent at the first router to a queue on the last one
    arrive there, each exactly once;
 3. the middle router without HA is frozen with SIGSTOP: its neighbours'
    keepalive counters run down and they close their links to it with
    reason C{keepalive}; once both have, no route leads to it, and
    messages sent to it wait in the sender's store (the lab says so only
    if the sender's backlog shows them);
 4. it is resumed with SIGCONT: its links come back to delivery, the
    waiting messages flow, and its consumer gets each exactly once;
 5. for each pair: messages flow from the first router to the pair, and
    its active instance's process is killed with SIGKILL as soon as they
    start to arrive (how many it held is printed); the backup takes over
    (how long it took is printed), and the consumer gets each message
    exactly once.  In C{etc/lab} that process also runs the backup of
    another pair (router-d's, beside router-c's primary; router-d's
    primary runs router-c's backup): router-d gets messages across the
    kill too, and its primary serves on alone;
 6. the killed process is started again: each of its instances finds its
    pair's active instance and catches up as its backup;
 7. failback: once the primary is in sync, the active backup hands the
    router back to it (C{allow-failback}) and follows it again
    (C{restart-backup}).

Then it points at the topology page (the admin endpoint's C{/}) and
C{/metrics}, and keeps reporting events until Ctrl-C, which stops every
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
import urllib.error
import urllib.request

from meshroute.cli.status_command import format_links
from meshroute.events import EventFollower, event_files

#: The HA states in which an instance serves.
ACTIVE = ("active-replicated", "active-alone")

#: twistd from the running interpreter's environment.
TWISTD = [sys.executable, "-c", "import sys; from twisted.scripts.twistd import run; sys.exit(run())"]


def read_toml(path: str) -> dict:
    with open(path, "rb") as f:
        return tomllib.load(f)


class LabProcess:
    """
    One router process of the lab: the router of its configuration file
    and the instances that file hosts (C{[[ha.colocated]]}, each file
    named relative to it), and its twistd log.
    """

    def __init__(self, config_path: str, log_dir: str) -> None:
        self.config_path = config_path
        config = read_toml(config_path)
        hosted = [os.path.join(os.path.dirname(config_path), entry["config"])
                  for entry in config.get("ha", {}).get("colocated", [])]
        #: Its own router first, then the instances it hosts.
        self.routers = [LabRouter(config, self), *(LabRouter(read_toml(path), self)
                                                   for path in hosted)]
        self.label = self.routers[0].label
        self.log_path = os.path.join(log_dir, f"{self.label}.log")
        self.process: subprocess.Popen | None = None
        #: Killed or stopped on purpose: its exit is no failure of the lab.
        self.down = False

    def start(self) -> None:
        self.down = False
        self.process = subprocess.Popen(
            [*TWISTD, "-n", "--pidfile=", f"--logfile={self.log_path}",
             "meshroute", "--config", self.config_path],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )


class LabRouter:
    """
    One router, or instance of a pair, of the lab: what it serves and
    writes.

    @param config: its configuration file's TOML.
    @param host: the process that runs it.
    """

    def __init__(self, config: dict, host: LabProcess) -> None:
        self.host = host
        self.name = config["router"]["name"]
        #: C{primary} or C{backup} for an instance of an HA pair, else None.
        self.ha_role = config.get("ha", {}).get("role")
        #: Names it: the router's name, and the role of an instance.
        self.label = f"{self.name}-{self.ha_role}" if self.ha_role else self.name
        self.connectors = len(config.get("routing", {}).get("connector", []))
        self.data_dir = config["router"]["data-dir"]
        endpoint = config.get("admin", {}).get("endpoint", "")
        port = endpoint.split(":")[1] if endpoint.startswith("tcp:") else None
        self.admin = f"http://127.0.0.1:{port}" if port else None
        endpoint = config.get("clients", {}).get("listener", {}).get("endpoint", "")
        port = endpoint.split(":")[1] if endpoint.startswith("tcp:") else None
        self.clients = f"tcp:127.0.0.1:{port}" if port else None
        self._events = EventFollower(self.data_dir, from_end=True)

    def new_events(self) -> list[dict]:
        """
        Events appended since the last call.
        """
        return self._events.new_events()

    def get(self, path: str):
        with urllib.request.urlopen(self.admin + path, timeout=2) as response:
            return json.load(response)

    def delivery_peers(self) -> set[str]:
        """
        The routers this one has a link in delivery to (none while it does
        not serve or does not answer).
        """
        try:
            return {link["peer"] for link in self.links() if link["stage"] == "delivery"}
        except OSError:
            return set()

    def links(self) -> list[dict]:
        """
        Its links; none for an instance of a pair that is not the active
        one (its admin API answers 503 C{not-active}: it has no router).
        """
        try:
            return self.get("/api/v1/links")
        except urllib.error.HTTPError as e:
            if self.ha_role and e.code == 503:
                return []
            raise

    def router_info(self) -> dict:
        return self.get("/api/v1/router")

    def ha(self) -> dict:
        return self.get("/api/v1/ha")

    def ha_state(self) -> str | None:
        """
        The instance's HA state, or None while its admin API does not
        answer (starting, killed).
        """
        try:
            return self.ha()["state"]
        except OSError:
            return None

    def serving(self) -> bool:
        return self.ha_state() in ACTIVE

    def queue_depth(self, queue: str) -> int:
        depths = {q["name"]: q["depth"] for q in self.get("/api/v1/queues")}
        return depths.get(queue, 0)

    def status(self) -> str:
        info = self.router_info()
        return format_links(info, self.links() if info.get("serving", True) else [])

    def describe_ha(self) -> str:
        ha = self.ha()
        lag = "-" if ha["lag"] is None else ha["lag"]
        return (f"{self.label:<16} {ha['state']:<17} epoch {ha['epoch']:<3} position "
                f"{ha['position']['epoch']}/{ha['position']['position']:<6} lag {lag}")


def counted(name: str) -> bool:
    """
    Whether events named C{name} are counted rather than printed: one per
    message (or publication) each, thousands of them.
    """
    return name.startswith("message.") or name == "topic.fanned-out"


def describe(event: dict, label: str) -> str | None:
    """
    One line for a person, or None for events not worth a line.

    @param label: who wrote it (L{LabRouter.label}: both instances of a
        pair write under the router's name).
    """
    stamp = time.strftime("%H:%M:%S", time.localtime(event["time"]))
    who = f"{stamp} {label:<9}"
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
    if name.startswith("ha."):
        return describe_ha(who, event)
    if name.startswith("session."):
        return describe_session(who, event)
    if counted(name):
        return None  # counted, not printed: there are thousands
    if name == "link.incarnation":
        return (f"{who} link {event['link']:<14} {event['direction']:<9} {peer:<9} has a new "
                f"store (restarted empty): its previous store's transfers are forgotten")
    if name == "connector.exhausted":
        return f"{who} link connector to {peer} gave up after {event['attempts']} attempts"
    if name == "security.authenticated":
        return f"{who} security: {event['user']} authenticated ({event['mechanism']})"
    if name == "security.denied":
        return (f"{who} security: {event['action']} {event['target']} by "
                f"{event['user'] or '?'} denied: {event['reason']}")
    return describe_fields(who, event)


def describe_fields(who: str, event: dict) -> str:
    """
    The line of an event the lab has no words for: its name and fields.
    """
    return f"{who} {event['event']}" + "".join(
        f" {key}={value}" for key, value in event.items() if key not in ("time", "router", "event"))


def describe_session(who: str, event: dict) -> str:
    """
    One line for a C{session.*} event, in the form of a link's, column for
    column: the session (its id's first 10 digits), the client, what
    happened.
    """
    what = event["event"].split(".", 1)[1]
    if what == "opened":
        ttl = event.get("ttl_ms")
        what = "→ opened" + (f", TTL {ttl} ms" if ttl is not None and ttl >= 0 else "")
    elif what == "recreated":
        what = f"→ recreated (session {event['requested_session_id'][:10]} was gone)"
    elif what == "reattached":
        what = (f"→ reattached after {event['disconnected_for_s']:.1f} s, "
                f"{event['deliveries_resent']} deliveries resent")
    elif event.get("reason"):
        what = f"{what}: {event['reason']}"
    client = event.get("client_id") or "?"
    return f"{who} session {event['session_id'][:10]:<11} client    {client:<9} {what}"


def describe_ha(who: str, event: dict) -> str | None:
    """
    One line for an C{ha.*} event (docs/events.md).
    """
    name = event["event"]
    if name == "ha.state":
        why = f" ({event['reason']})" if event.get("reason") else ""
        return f"{who} ha: {event['state']}, epoch {event['epoch']}{why}"
    if name == "ha.epoch":
        return f"{who} ha: granted epoch {event['epoch']} by a majority, {event['mode']}"
    if name == "ha.failover":
        return (f"{who} ha: failover ({event['kind']}) from {event['from']} to {event['to']}, "
                f"epoch {event['epoch']}: {event['duration_ms']:.0f} ms since it last heard "
                f"the old active")
    if name == "ha.fenced":
        return f"{who} ha: fenced in epoch {event['epoch']}: {event['reason']}"
    if name == "ha.replication":
        lag = "" if event.get("lag") is None else f", lag {event['lag']}"
        return f"{who} ha: its backup {event['status']} at position {event['position']}{lag}"
    if name == "ha.vote":
        answer = "granted" if event["granted"] else f"refused ({event['reason']})"
        return f"{who} ha: vote for {event['candidate']}, epoch {event['epoch']}: {answer}"
    if name == "ha.heartbeat-refused":
        return (f"{who} ha: refused a heartbeat of {event['instance']} in epoch "
                f"{event['epoch']} (granted {event['granted_epoch']})")
    return describe_fields(who, event)


def meshroute_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "meshroute.cli", *args]


class Consumer:
    """
    A C{meshroute receive} process, started before the messages are sent.

    @param routers: the router, or both instances of a pair (the consumer
        is given both endpoints and finds the active one).
    """

    def __init__(self, routers: list[LabRouter], queue: str, count: int,
                 source: tuple[str, ...] = ()) -> None:
        self.description = f"{queue} on {routers[0].name}"
        self.count = count
        connect = [arg for router in routers for arg in ("--connect", router.clients)]
        self.process = subprocess.Popen(
            meshroute_command("receive", *connect, *(source or ("--queue", queue)),
                              "--count", str(count), "--timeout", "60", "--json"),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )

    def report(self, lab: "Lab") -> None:
        """
        Wait for the consumer to end, print the lab's events so far (its
        session's among them), then what it received.
        """
        out, err = self.process.communicate(timeout=90)
        lab.report()
        ids = [json.loads(line)["id"] for line in out.splitlines() if line.strip()]
        verdict = "each exactly once" if len(set(ids)) == len(ids) == self.count else (
            f"{len(set(ids))} distinct, {len(ids) - len(set(ids))} doubled; {err.strip()}")
        print(f"   consumer of {self.description}: received {len(ids)} of "
              f"{self.count}, {verdict}", flush=True)


class Producer:
    """
    A C{meshroute send} process.
    """

    def __init__(self, router: LabRouter, address: str, count: int, label: str) -> None:
        self.description = f"{count} messages to {address} at {router.label}"
        topic = address.removeprefix("topic:")
        target = ("--topic", topic) if topic != address else ("--to", address)
        self.process = subprocess.Popen(
            meshroute_command("send", "--connect", router.clients, *target,
                              "--count", str(count), "--body", label),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )

    def report(self, lab: "Lab") -> None:
        """
        Wait for the producer to end, print the lab's events so far, then
        whether its messages were accepted.
        """
        _, err = self.process.communicate(timeout=120)
        lab.report()
        status = "durably accepted" if self.process.returncode == 0 else f"FAILED: {err.strip()}"
        print(f"   meshroute send: {self.description}: {status}", flush=True)


def send(lab: "Lab", router: LabRouter, address: str, count: int, label: str) -> None:
    Producer(router, address, count, label).report(lab)


class Lab:
    def __init__(self, processes: list[LabProcess]) -> None:
        self.processes = processes
        self.routers = [router for process in processes for router in process.routers]
        self.message_counts: collections.Counter = collections.Counter()

    def report(self) -> None:
        lines = []
        for router in self.routers:
            for event in router.new_events():
                if counted(event["event"]):
                    self.message_counts[router.label, event["event"]] += 1
                line = describe(event, router.label)
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
                      in sorted(self.message_counts.items()) if name == router.label}
            if counts:
                listed = ", ".join(f"{what} {n}" for what, n in counts.items())
                print(f"   {router.label} event log: messages {listed}", flush=True)

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
        for process in self.processes:
            if not process.down and process.process.poll() is not None:
                error = process.process.stderr.read().decode(errors="replace")
                raise SystemExit(
                    f"{process.label} exited with status {process.process.returncode}:\n{error}"
                    f"(see {process.log_path})"
                )

    def all_in_delivery(self, expected: int) -> bool:
        try:
            links = [link for router in self.routers for link in router.links()]
        except OSError:
            return False
        return len(links) == expected and all(link["stage"] == "delivery" for link in links)

    def linked_to(self, name: str) -> list[str]:
        """
        The running routers other than C{name} with a link in delivery to
        it, by label.
        """
        return [router.label for router in self.routers
                if not router.host.down and router.name != name
                and name in router.delivery_peers()]

    def instances(self, name: str) -> list[LabRouter]:
        """
        The processes of router C{name}: one, or the two instances of a
        pair (primary first).
        """
        return sorted((router for router in self.routers if router.name == name),
                      key=lambda router: router.ha_role != "primary")

    def pairs(self) -> list[list[LabRouter]]:
        names = sorted({router.name for router in self.routers if router.ha_role})
        return [self.instances(name) for name in names]

    def pairs_ready(self) -> bool:
        """
        Whether each pair has an active instance replicating to an in-sync
        backup.
        """
        return all(sorted(router.ha_state() or "" for router in pair)
                   == ["active-replicated", "backup-in-sync"] for pair in self.pairs())

    def print_pair(self, pair: list[LabRouter]) -> None:
        for router in pair:
            try:
                print(f"   {router.describe_ha()}", flush=True)
            except OSError:
                print(f"   {router.label:<16} not answering", flush=True)

    def print_status(self) -> None:
        print()
        for router in self.routers:
            if not router.host.down:
                print(router.status(), end="")
        print(flush=True)

    def stop(self) -> None:
        for process in self.processes:
            if process.process and process.process.poll() is None:
                process.process.send_signal(signal.SIGCONT)
                process.process.terminate()
        for process in self.processes:
            if process.process:
                try:
                    code = process.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.process.kill()
                    code = process.process.wait()
                hosted = "".join(f" and {router.label}" for router in process.routers[1:])
                print(f"{process.label}{hosted} stopped (exit status {code})")
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
    paths = [router.data_dir for router in routers if event_files(router.data_dir)]
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


def show_pair(lab: Lab, pair: list[LabRouter], sender: LabRouter, expected_links: int,
              count: int = 2000) -> set[str]:
    """
    The pair's part of the scenario: a failover under traffic (SIGKILL of
    the active's process), the killed process's return (its instances
    catch up as backups), and failback (when the killed one was the
    primary).  A process that also runs instances of other pairs
    (colocated) takes them down too: their routers get traffic across
    the kill as well, and their other instances serve on alone.

    @return: the names of the routers whose instances the kill took.
    """
    name = pair[0].name
    print(f"\n== 5. {name} is a pair: two instances, one active, the other replicating every "
          "store change; the other routers vote (docs/ha.md)", flush=True)
    active = next(router for router in pair if router.serving())
    standby = next(router for router in pair if router is not active)
    killed = active.host
    colocated = [router for router in killed.routers if router is not active]
    gone_too = _listed([router.label for router in colocated]) if colocated else ""
    if colocated:
        print(f"   {active.label}'s process also runs {gone_too} ([[ha.colocated]]): "
              "the two pairs' processes back each other up", flush=True)
    for router in (active, *colocated):
        lab.print_pair(lab.instances(router.name))
    hit = [router.name for router in (active, *colocated)]
    print(f"   {count} messages from {sender.name} to payments on {_listed(hit)}; the process "
          f"of the active instance {active.label} is killed (SIGKILL) as soon as they start to "
          "arrive", flush=True)
    producers = [Producer(sender, f"payments@{router}", count, "sent across the failover")
                 for router in hit]
    lab.watch(30, until=lambda: active.queue_depth("payments") >= count // 10)
    depth = active.queue_depth("payments")
    killed.down = True
    killed.process.kill()
    killed_at = time.monotonic()
    killed.process.wait()
    with_it = f", and {gone_too} with it (one process)" if colocated else ""
    print(f"   {active.label} killed{with_it}; {depth} of the {count} were in its queue a "
          "moment before", flush=True)
    if lab.watch(15, until=standby.serving):
        print(f"   {standby.label} serves {time.monotonic() - killed_at:.1f} s after the kill "
              "(the bound: lease-timeout + 2 × heartbeat-interval + 1 s, 5 s here)", flush=True)
    else:
        print(f"   {standby.label} does not serve 15 s after the kill; see its log", flush=True)
    for router in colocated:
        other = next(each for each in lab.instances(router.name) if each is not router)
        if lab.watch(15, until=lambda: other.ha_state() == "active-alone"):
            print(f"   {other.label} serves {router.name} alone {time.monotonic() - killed_at:.1f} "
                  f"s after the kill, {router.label} gone with the process (replication-timeout: "
                  "5 s)", flush=True)
        else:
            print(f"   {other.label} does not serve alone 15 s after the kill; see its log",
                  flush=True)
    for producer in producers:
        producer.report(lab)
    for consumer in [Consumer(lab.instances(router), "payments", count) for router in hit]:
        consumer.report(lab)

    print(f"\n== 6. {active.label} returns"
          + (f" with {gone_too}" if colocated else "")
          + ": each asks the voters, finds its pair's active instance and catches up as its "
          "backup", flush=True)
    restarted_at = time.monotonic()
    killed.start()
    for router in killed.routers:
        # With allow-failback the backup hands the router back as soon as
        # the primary is in sync: that state may be over before a poll sees it.
        if lab.watch(60, until=lambda: router.ha_state() in ("backup-in-sync", *ACTIVE)):
            print(f"   {router.label} in sync {time.monotonic() - restarted_at:.1f} s after its "
                  "restart", flush=True)
    primary, backup = pair
    if primary is active:
        print(f"\n== 7. failback: {backup.label} hands the router back to {primary.label} "
              "once it is in sync (allow-failback), and follows it again (restart-backup)",
              flush=True)
        if lab.watch(30, until=primary.serving):
            print(f"   {primary.label} serves again {time.monotonic() - restarted_at:.1f} s "
                  "after its restart", flush=True)
        else:
            print(f"   {primary.label} does not serve 30 s after its restart; see the logs",
                  flush=True)
    if lab.watch(30, until=lab.pairs_ready):
        for router in hit:
            lab.print_pair(lab.instances(router))
    lab.watch(30, until=lambda: lab.all_in_delivery(expected_links))
    for producer in [Producer(sender, f"payments@{router}", 200, "sent after the failback")
                     for router in hit]:
        producer.report(lab)
    for consumer in [Consumer(lab.instances(router), "payments", 200) for router in hit]:
        consumer.report(lab)
    return set(hit)


def _listed(names: list[str]) -> str:
    """
    C{"a"}, C{"a and b"}, C{"a, b and c"}.
    """
    return " and ".join(filter(None, [", ".join(names[:-1]), names[-1]]))


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
    lab = Lab([LabProcess(path, log_dir) for path in paths])
    # Both instances of a pair have the same connectors; only the active runs them.
    expected_links = 2 * sum(router.connectors for router in lab.routers
                             if router.ha_role != "backup")
    print(f"meshroute lab: starting {len(lab.routers)} routers in {len(paths)} processes from "
          f"{args.directory}")
    for router in lab.routers:
        where = (f"log {router.host.log_path}" if router is router.host.routers[0]
                 else f"in {router.host.label}'s process")
        print(f"  {router.label:<16} topology page {router.admin}/   {where}")
    for process in lab.processes:
        process.start()
    started = time.monotonic()
    try:
        print("\n== 1. the mesh comes up: every link passes the four stages"
              + (", each pair elects its active" if lab.pairs() else ""))
        if not lab.watch(30, until=lambda: lab.all_in_delivery(expected_links)
                         and lab.pairs_ready()):
            print("not every link reached delivery in 30 s; see the logs above")
        lab.print_status()
        plain = [router for router in lab.routers if router.ha_role is None]
        first, victim = plain[0], plain[len(plain) // 2]
        last = lab.instances(max(router.name for router in lab.routers))

        print(f"== 2. traffic: 1000 messages from {first.name} to orders@{last[0].name}")
        consumer = Consumer(last, "orders", 1000)
        send(lab, first, f"orders@{last[0].name}", 1000, "lab traffic")
        consumer.report(lab)
        lab.print_message_counts()

        durable = ("--topic", "lab.#", "--durable", "lab", "--client-id", "lab")
        print(f"\n   a durable subscription to topic lab.# at {victim.name}: it keeps collecting "
              "while nobody consumes it (docs/topics.md)")
        subscribe = subprocess.run(
            meshroute_command("receive", "--connect", victim.clients, *durable, "--mesh-wide",
                              "--timeout", "1"), capture_output=True, text=True, timeout=60)
        lab.report()
        print("   its interest reached every router; the subscriber left" if
              subscribe.returncode in (0, 1) else
              f"   subscribing failed: {subscribe.stderr.strip()}", flush=True)

        neighbours = " and ".join(lab.linked_to(victim.name))
        print(f"\n== 3. freezing {victim.name} with SIGSTOP: its neighbours ({neighbours}) stop "
              "hearing keepalives and close their links to it after about five intervals")
        victim.host.process.send_signal(signal.SIGSTOP)
        if lab.watch(20, until=lambda: not lab.linked_to(victim.name)):
            print(f"   {neighbours} closed their links to {victim.name}: no route leads to it "
                  "now", flush=True)
        else:
            print(f"   20 s on, {' and '.join(lab.linked_to(victim.name))} still have a link "
                  f"to {victim.name}", flush=True)
        send(lab, first, f"inbox@{victim.name}", 500, "sent while frozen")
        backlog = first.router_info().get("backlog", {})
        held = backlog.get(victim.name, 0)
        if held == 500:
            print(f"   {first.name} holds them in its store until {victim.name} is reachable "
                  f"again: backlog {backlog}", flush=True)
        else:
            print(f"   {first.name} holds {held} of them in its store (backlog {backlog}); "
                  f"the other {500 - held} left on a route towards {victim.name} that was "
                  "still up", flush=True)
        send(lab, first, "topic:lab.news", 300, "published while frozen")

        print(f"\n== 4. resuming {victim.name} with SIGCONT: it reconnects and the "
              "waiting messages flow")
        victim.host.process.send_signal(signal.SIGCONT)
        if lab.watch(20, until=lambda: lab.all_in_delivery(expected_links)):
            print("   every link is in delivery again", flush=True)
        else:
            print("   20 s on, not every link is in delivery again; see the logs", flush=True)
        Consumer([victim], "inbox", 500).report(lab)
        Consumer([victim], "lab.#", 300, (*durable, "--forget")).report(lab)
        lab.print_message_counts()
        shown: set[str] = set()
        for pair in lab.pairs():
            if pair[0].name not in shown:
                shown |= show_pair(lab, pair, first, expected_links)
        lab.print_message_counts()
        lab.print_status()
        print("== the mesh runs; events appear as they happen. Ctrl-C stops every router.")
        print(f"   watch it on the topology page, {first.admin}/ (every router's admin "
              f"endpoint serves one), and scrape {first.admin}/metrics (Prometheus)", flush=True)
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
