"""
Real router processes on 127.0.0.1, for end-to-end tests.

A test asks the L{mesh} fixture for a L{Mesh}, describes routers with
L{Mesh.router} (which allocates their ports and writes their TOML
configuration into the test's C{tmp_path}), starts them with
L{Mesh.start} and then watches them from outside, as an operator would:
through the admin API (L{RouterProcess.links}), the event log
(L{RouterProcess.events}) and signals (L{RouterProcess.sigstop} and
friends)::

    def test_link(mesh):
        b = mesh.router("router-b")
        a = mesh.router("router-a", connect=[b])
        a_proc, b_proc = mesh.start(a, b)
        a_proc.wait_delivery("router-b")

Each router runs as C{twistd -n meshroute --config FILE} with C{PYTHONPATH}
set to this checkout, so the checkout's C{twisted/plugins/meshroute_plugin.py}
and C{meshroute} package are the ones under test.  Its working directory is
its own directory under C{tmp_path}, which also holds its data-dir, its
twistd log (C{LABEL.log}) and what it printed (C{LABEL.out}).

For messaging, C{Mesh.router(..., clients=True, routing={...}, store={...})}
adds a client listener on a fresh port (L{RouterProcess.client_endpoint})
and C{[routing]} / C{[store]} keys; L{Mesh.send} runs C{meshroute send} to
completion, L{Mesh.start_send} and L{Mesh.start_receive} run producers and
consumers as background processes (L{ClientProcess}: what a C{receive
--json} printed so far is L{ClientProcess.messages}), and a router's
routes, queues and store are read with L{RouterProcess.routes},
L{RouterProcess.queues} and L{RouterProcess.store_counts}::

    def test_send(mesh):
        c = mesh.router("router-c", clients=True)
        a = mesh.router("router-a", connect=[c], clients=True)
        a_proc, c_proc = mesh.start(a, c)
        a_proc.wait_route("router-c")
        consumer = mesh.start_receive(c_proc, "q", count=10, timeout=30)
        assert mesh.send(a_proc, "q@router-c", 10).returncode == 0
        assert consumer.wait() == 0 and len(consumer.messages()) == 10

Synchronisation is always a poll against a deadline (L{wait_until}); a
test never sleeps to let something happen.  When the test ends, the
fixture kills whatever is still running (stopped processes are continued
first, client commands are killed too), and if the test failed, the tail of
every router's log and every client command's output is added to the
failure report.
"""

import http.client
import json
import os
import secrets
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, TypeVar

import pytest

from meshroute.events import events_dir, read_events
from meshroute.testing.ports import PortAllocator

#: The checkout under test: put first on the routers' PYTHONPATH.
REPO_ROOT = Path(__file__).resolve().parents[2]

#: Short intervals for tests, in milliseconds.  stage-valid-timeout and
#: reject-disconnect-delay are at the minimum the configuration allows.
KEEPALIVE_INTERVAL_MS = 200
STAGE_VALID_TIMEOUT_MS = 1000
REJECT_DISCONNECT_DELAY_MS = 1000
RETRY_INTERVAL_MS = 200
MAX_RETRY_INTERVAL_MS = 200

#: How long a router may take to answer its admin API after exec.
READY_TIMEOUT_S = 30.0

#: Runs twistd in-process.  C{python -m twisted} is C{twist}, which has
#: neither C{-n} nor C{--pidfile}; this is what the C{twistd} script does.
_TWISTD = "import sys; sys.argv[0] = 'twistd'; from twisted.scripts.twistd import run; run()"

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """
    A condition polled by L{wait_until} did not hold before the deadline.
    """


def wait_until(
    predicate: Callable[[], T],
    timeout: float = 10.0,
    *,
    what: str | None = None,
    interval: float = 0.02,
    retry_on: tuple[type[BaseException], ...] = (),
) -> T:
    """
    Call C{predicate} until it returns something true, and return that.

    @param timeout: seconds before giving up.
    @param what: what we wait for, for the failure message.
    @param interval: the pause between two calls; only ever a pause inside
        this loop, never a way to synchronise.
    @param retry_on: exceptions that mean "not yet" (a router not listening
        yet, say); the last one is reported if the deadline passes.
    @raise WaitTimeout: the deadline passed.
    """
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            result = predicate()
        except retry_on as e:
            result, last_error = None, e
        else:
            last_error = None
        if result:
            return result
        if time.monotonic() >= deadline:
            message = f"timed out after {timeout:g} s waiting for {what or predicate!r}"
            if last_error is not None:
                message += f" (last error: {last_error!r})"
            raise WaitTimeout(message)
        time.sleep(interval)


def _xdist_worker() -> tuple[int, int]:
    """This process's pytest-xdist worker number and the number of workers."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")
    try:
        return int(name.removeprefix("gw")), int(count)
    except ValueError:
        return 0, 1


#: One allocator for the whole pytest session.
PORTS = PortAllocator(*_xdist_worker())


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (str, os.PathLike)):
        return json.dumps(os.fspath(value))
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    raise TypeError(f"cannot write {value!r} as TOML")


def _toml_table(header: str, table: dict[str, object]) -> str:
    lines = [header]
    lines.extend(f"{key} = {_toml_value(value)}" for key, value in table.items())
    return "\n".join(lines) + "\n"


@dataclass
class RouterSpec:
    """
    One router's configuration, and where its files live.

    The tables hold TOML keys exactly as an operator writes them; edit them
    (to break a configuration on purpose, say) and call L{write} again.

    @ivar label: unique within the test; names the router's directory and
        files.  It is the router name unless two processes share a name.
    @ivar routing_port: the routing listener's port, or None without one.
    @ivar extra: more top-level tables, C{{"section": {key: value}}}
        (C{"clients.listener"}, C{"routing"}, C{"store"}, ...).
    @ivar client_port: the client listener's port, or None without one.
    @ivar arrays: arrays of tables, C{{"ha.witness": [{key: value}, ...]}}.
    @ivar replication_port: an HA instance's replication listener's port.
    @ivar admin: more keys of its C{[admin]} table (C{token-file}), or
        another C{endpoint}.
    @ivar admin_token: the token L{RouterProcess.get} presents.
    @ivar instance_dir: a shared-store instance's own directory in the
        shared data dir, where its event log is; None: the data dir's.
    """

    name: str
    label: str
    directory: Path
    admin_port: int | None
    routing_port: int | None
    router: dict[str, object]
    listener: dict[str, object] | None
    connectors: list[dict[str, object]] = field(default_factory=list)
    extra: dict[str, dict[str, object]] = field(default_factory=dict)
    client_port: int | None = None
    arrays: dict[str, list[dict[str, object]]] = field(default_factory=dict)
    replication_port: int | None = None
    admin: dict[str, object] = field(default_factory=dict)
    admin_token: str | None = None
    instance_dir: Path | None = None

    @property
    def config_path(self) -> Path:
        return self.directory / f"{self.label}.toml"

    @property
    def data_dir(self) -> Path:
        return Path(self.router["data-dir"])

    @property
    def events_dir(self) -> Path:
        """
        The directory of its event files (what the audit reads).
        """
        return Path(events_dir(str(self.event_log_dir)))

    @property
    def event_log_dir(self) -> Path:
        """
        The directory whose C{events/} holds its event log.
        """
        return self.instance_dir or self.data_dir

    @property
    def log_path(self) -> Path:
        """
        The twistd log file.
        """
        return self.directory / f"{self.label}.log"

    def log_text(self) -> str:
        """
        The whole twistd log, oldest first: the files twistd rotated out
        at each megabyte (C{LABEL.log.N}, the highest the oldest), then
        C{log_path}.
        """
        rotated = sorted(self.directory.glob(f"{self.label}.log.*"),
                         key=lambda path: int(path.suffix[1:]), reverse=True)
        return "".join(path.read_text() for path in [*rotated, self.log_path]
                       if path.exists())

    @property
    def output_path(self) -> Path:
        """
        What the process printed on stdout and stderr (startup errors).
        """
        return self.directory / f"{self.label}.out"

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    @property
    def routing_endpoint(self) -> str:
        """
        The client endpoint string that reaches this router's listener.
        """
        return f"tcp:127.0.0.1:{self.routing_port}"

    @property
    def client_endpoint(self) -> str:
        """
        The client endpoint string that reaches this router's client
        listener (what C{meshroute send --connect} takes).
        """
        if self.client_port is None:
            raise ValueError(f"{self.label} has no client listener")
        return f"tcp:127.0.0.1:{self.client_port}"

    @property
    def store_path(self) -> Path:
        return self.data_dir / "store.db"

    def to_toml(self) -> str:
        tables = [_toml_table("[router]", self.router)]
        if self.listener is not None:
            tables.append(_toml_table("[routing.listener]", self.listener))
        tables.extend(_toml_table("[[routing.connector]]", c) for c in self.connectors)
        if self.admin_port is not None:
            tables.append(_toml_table(
                "[admin]",
                {"endpoint": f"tcp:{self.admin_port}:interface=127.0.0.1", **self.admin}))
        tables.extend(_toml_table(f"[{name}]", table) for name, table in self.extra.items())
        tables.extend(_toml_table(f"[[{name}]]", table)
                      for name, array in self.arrays.items() for table in array)
        return "\n".join(tables)

    def write(self) -> Path:
        """
        Write the configuration file; return its path.
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(self.to_toml())
        return self.config_path


def write_token_file(directory: Path, token: str) -> Path:
    """
    Write C{token} into an C{[admin] token-file} in C{directory}, readable
    by its owner only, as the configuration demands.
    """
    path = directory / "admin.token"
    directory.mkdir(parents=True, exist_ok=True)
    path.write_text(token + "\n")
    path.chmod(0o600)
    return path


def router_env() -> dict[str, str]:
    """
    The environment of every process we start: this checkout first on
    PYTHONPATH, unbuffered output.
    """
    env = dict(os.environ)
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + path if path else "")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def twistd_command(spec: RouterSpec) -> list[str]:
    """
    C{twistd -n meshroute --config FILE} for C{spec}, without a pidfile and
    logging to C{spec.log_path}.
    """
    return [
        sys.executable,
        "-c",
        _TWISTD,
        "-n",
        "--pidfile=",
        f"--logfile={spec.log_path}",
        "meshroute",
        "--config",
        str(spec.config_path),
    ]


def run_cli(*args: str, timeout: float = 60.0, cwd: Path | None = None):
    """
    Run the C{meshroute} command from this checkout and wait for it.

    @return: the L{subprocess.CompletedProcess}, output captured as text.
    """
    return subprocess.run(
        [sys.executable, "-m", "meshroute.cli", *args],
        env=router_env(),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def tail(path: Path, lines: int = 40) -> str:
    """
    The last C{lines} lines of a text file, or a note that it is missing.
    """
    try:
        text = path.read_text(errors="replace")
    except OSError as e:
        return f"<{path}: {e.strerror}>"
    return "\n".join(text.splitlines()[-lines:])


#: What a failed admin API request can raise while a router starts, stops
#: or is stopped.
_HTTP_ERRORS = (OSError, http.client.HTTPException, json.JSONDecodeError)


class RouterProcess:
    """
    One running router process and how to watch and disturb it.

    @ivar spec: its L{RouterSpec}.
    @ivar popen: its L{subprocess.Popen}.
    @ivar stopped: True between L{sigstop} and L{sigcont}.
    """

    def __init__(self, spec: RouterSpec, popen: subprocess.Popen) -> None:
        self.spec = spec
        self.popen = popen
        self.stopped = False

    def __repr__(self) -> str:
        return f"<RouterProcess {self.spec.label} pid={self.popen.pid}>"

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def pid(self) -> int:
        return self.popen.pid

    # -- admin API -----------------------------------------------------------

    def get(self, path: str, timeout: float = 5.0):
        """
        GET C{path} from the admin API and decode its JSON.
        """
        request = urllib.request.Request(self.spec.admin_url + path)
        if self.spec.admin_token is not None:
            request.add_header("Authorization", f"Bearer {self.spec.admin_token}")
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.load(response)

    def info(self) -> dict:
        """
        C{GET /api/v1/router}.
        """
        return self.get("/api/v1/router")

    def links(self) -> list[dict]:
        """
        C{GET /api/v1/links}.
        """
        return self.get("/api/v1/links")

    def delivery_links(self) -> dict[str, dict]:
        """
        The links in delivery, by peer name.
        """
        return {link["peer"]: link for link in self.links() if link["stage"] == "delivery"}

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> dict:
        """
        Wait until the admin API answers with this router's name and says
        it is serving (its store is open: its listeners accept).

        @raise RuntimeError: the process exited first (its output is in the
            message).
        """

        def ready():
            if self.popen.poll() is not None:
                raise RuntimeError(
                    f"{self.spec.label} exited with {self.popen.returncode} before it was "
                    f"ready:\n{tail(self.spec.output_path)}\n{tail(self.spec.log_path)}"
                )
            info = self.info()
            return info if info.get("name") == self.name and info.get("serving") else None

        return wait_until(
            ready, timeout, what=f"{self.spec.label} to serve its admin API",
            interval=0.05, retry_on=_HTTP_ERRORS,
        )

    def ha(self) -> dict:
        """
        C{GET /api/v1/ha}.
        """
        return self.get("/api/v1/ha")

    def wait_ha(self, *states: str, timeout: float = READY_TIMEOUT_S) -> dict:
        """
        Wait until this HA instance reports one of C{states}; return its
        C{/api/v1/ha}.
        """

        def reached():
            if self.popen.poll() is not None:
                raise RuntimeError(
                    f"{self.spec.label} exited with {self.popen.returncode}:\n"
                    f"{tail(self.spec.output_path)}\n{tail(self.spec.log_path)}")
            ha = self.ha()
            return ha if ha["state"] in states else None

        return wait_until(reached, timeout, what=f"{self.spec.label} to be {'/'.join(states)}",
                          interval=0.05, retry_on=_HTTP_ERRORS)

    def wait_for(self, predicate: Callable[[], T], timeout: float = 10.0, what: str | None = None) -> T:
        """
        Poll C{predicate} until it returns something true, and return that.

        Admin API errors count as "not yet".  Fails at once if the process
        exits.
        """

        def check():
            if self.popen.poll() is not None:
                raise AssertionError(
                    f"{self.spec.label} exited with {self.popen.returncode} while waiting "
                    f"for {what or predicate!r}"
                )
            return predicate()

        return wait_until(check, timeout, what=what, retry_on=_HTTP_ERRORS)

    def wait_delivery(self, *peers: str, timeout: float = 15.0) -> dict[str, dict]:
        """
        Wait until this router has a link in delivery to each of C{peers}.

        @return: those links, by peer name.
        """

        def all_in_delivery():
            links = self.delivery_links()
            if all(peer in links for peer in peers):
                return {peer: links[peer] for peer in peers}
            return None

        return self.wait_for(
            all_in_delivery, timeout, what=f"{self.spec.label} in delivery with {peers}"
        )

    @property
    def client_endpoint(self) -> str:
        """
        The client endpoint string of this router's client listener.
        """
        return self.spec.client_endpoint

    def routes(self) -> dict[str, dict]:
        """
        C{GET /api/v1/routes}: C{{router: {"next_hop", "hops"}}}.
        """
        return self.get("/api/v1/routes")

    def queues(self) -> dict[str, dict]:
        """
        C{GET /api/v1/queues}, by queue name.
        """
        return {queue["name"]: queue for queue in self.get("/api/v1/queues")}

    def queue_depth(self, queue: str) -> int:
        """
        The depth of local queue C{queue} (0 when the router does not list it).
        """
        return self.queues().get(queue, {}).get("depth", 0)

    def wait_route(self, router: str, next_hop: str | None = None, timeout: float = 15.0) -> dict:
        """
        Wait until this router has a route to C{router} (through
        C{next_hop}, if given).

        @return: the route, C{{"next_hop", "hops"}}.
        """

        def routed():
            route = self.routes().get(router)
            if route is None or route.get("next_hop") is None:
                return None
            if next_hop is not None and route["next_hop"] != next_hop:
                return None
            return route

        via = f" via {next_hop}" if next_hop else ""
        return self.wait_for(routed, timeout, what=f"{self.spec.label}: a route to {router}{via}")

    def store_counts(self) -> dict[str, int]:
        """
        How many messages this router's store holds, by place
        (C{"backlog"}, C{"outbox"}, C{"queue"}), read from its SQLite file
        with a read-only connection (the router keeps it in WAL mode, so
        this does not disturb it, running or not).  The admin API shows
        queues but not what waits for a route or an acknowledgement; this
        is how a test knows that nothing is left in flight anywhere.
        """
        uri = f"file:{self.spec.store_path}?mode=ro"
        try:
            connection = sqlite3.connect(uri, uri=True, timeout=5)
        except sqlite3.OperationalError:
            return {}
        try:
            return dict(connection.execute("SELECT state, count(*) FROM messages GROUP BY state"))
        except sqlite3.OperationalError:
            # Not created yet.
            return {}
        finally:
            connection.close()

    def wait_nothing_in_flight(self, timeout: float = 10.0) -> None:
        """
        Wait until this router's store holds nothing that waits for a route
        or for a neighbour's acknowledgement (no backlog, no outbox): what
        it took is in its queues or handed on for good, so no copy of it
        can still turn up downstream.
        """
        self.wait_for(lambda: not {"backlog", "outbox"} & set(self.store_counts()),
                      timeout=timeout, what=f"{self.spec.label}'s backlog and outbox to empty")

    def stored_messages(self) -> list[dict]:
        """
        Every message in this router's store (running, stopped or dead),
        read as L{store_counts} does: C{{"msg_id", "state", "dest",
        "body"}}, the body decoded as UTF-8 (with replacement).
        """
        uri = f"file:{self.spec.store_path}?mode=ro"
        connection = sqlite3.connect(uri, uri=True, timeout=5)
        try:
            rows = connection.execute(
                "SELECT msg_id, state, dest_queue || '@' || dest_router, body FROM messages"
            ).fetchall()
        finally:
            connection.close()
        return [
            {"msg_id": msg_id, "state": state, "dest": dest,
             "body": bytes(body).decode("utf-8", errors="replace")}
            for msg_id, state, dest, body in rows
        ]

    # -- event log -----------------------------------------------------------

    def events(self, event: str | None = None, **fields) -> list[dict]:
        """
        The event log's well-formed records, optionally only those of
        C{event} whose fields equal C{fields}.
        """
        return [
            r
            for r in read_events(str(self.spec.event_log_dir))
            if (event is None or r.get("event") == event)
            and all(r.get(key) == value for key, value in fields.items())
        ]

    def wait_event(
        self, event: str, timeout: float = 10.0, count: int = 1, **fields
    ) -> list[dict]:
        """
        Wait until the event log holds at least C{count} matching records.

        Works on a stopped or exited router: the file is read directly.

        @return: every matching record.
        """

        def enough():
            found = self.events(event, **fields)
            return found if len(found) >= count else None

        what = f"{count} x {event} {fields or ''} in {self.spec.label}'s event log"
        return wait_until(enough, timeout, what=what)

    # -- signals -------------------------------------------------------------

    def sigstop(self) -> None:
        """
        Freeze the process: its sockets stay open, it sends nothing.
        """
        self.popen.send_signal(signal.SIGSTOP)
        self.stopped = True

    def sigcont(self) -> None:
        self.popen.send_signal(signal.SIGCONT)
        self.stopped = False

    def sigkill(self, timeout: float = 10.0) -> int:
        """
        Kill the process and wait for it; return its exit status.
        """
        if self.popen.poll() is None:
            self.popen.kill()
        self.stopped = False
        return self.popen.wait(timeout)

    def terminate(self, timeout: float = 15.0) -> int:
        """
        Send SIGTERM and wait for the process to exit; return its exit
        status (negative for death by a signal, as in L{subprocess}).
        """
        if self.stopped:
            self.sigcont()
        self.popen.terminate()
        return self.popen.wait(timeout)

    def log_tail(self, lines: int = 40) -> str:
        return tail(self.spec.log_path, lines)


class ClientProcess:
    """
    A C{meshroute} client command (C{send}, C{receive}) running in the
    background, its stdout and stderr going to files under C{directory}
    so that a test can read what it printed so far without a pipe that
    could fill up.

    @ivar label: names its files (C{LABEL.out}, C{LABEL.err}).
    @ivar args: the command's arguments (after C{meshroute}, or after
        C{program}).
    """

    def __init__(self, label: str, args: list[str], directory: Path,
                 program: list[str] | None = None) -> None:
        """
        @param program: what runs with C{args}: C{meshroute} by default,
            or another command line (a client script of the tests).
        """
        self.label = label
        self.args = list(args)
        directory.mkdir(parents=True, exist_ok=True)
        self.stdout_path = directory / f"{label}.out"
        self.stderr_path = directory / f"{label}.err"
        program = program or [sys.executable, "-m", "meshroute.cli"]
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.popen = subprocess.Popen(
                [*program, *self.args],
                env=router_env(), stdin=subprocess.DEVNULL, stdout=out, stderr=err,
            )

    def __repr__(self) -> str:
        return f"<ClientProcess {self.label} pid={self.popen.pid}>"

    @property
    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def poll(self) -> int | None:
        return self.popen.poll()

    def wait(self, timeout: float = 60.0) -> int:
        """
        Wait for the command to exit; return its exit status.
        """
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            raise WaitTimeout(
                f"{self.label} ({' '.join(self.args)}) still running after {timeout:g} s; "
                f"stderr:\n{tail(self.stderr_path)}"
            ) from None

    def messages(self) -> list[dict]:
        """
        The JSON objects printed so far by C{receive --json}, one per
        complete line (a line still being written is left for later).
        """
        with open(self.stdout_path, "rb") as f:
            data = f.read()
        complete = data[: data.rfind(b"\n") + 1]
        return [json.loads(line) for line in complete.splitlines() if line.strip()]

    def count(self) -> int:
        """
        How many complete lines it printed so far.
        """
        with open(self.stdout_path, "rb") as f:
            return f.read().count(b"\n")

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        try:
            self.popen.wait(10)
        except subprocess.TimeoutExpired:
            pass


class Mesh:
    """
    The routers of one test: their configurations, processes and shared
    password file, all under one directory.

    @ivar password_file: the mesh's shared secret, used by default by every
        listener and connector.
    """

    def __init__(self, directory: Path, ports: PortAllocator = PORTS) -> None:
        self.directory = directory
        self.ports = ports
        self.processes: list[RouterProcess] = []
        self.specs: list[RouterSpec] = []
        self.clients: list[ClientProcess] = []
        self.password_file = self.secret_file("mesh")

    def secret_file(self, name: str, secret: str | None = None) -> Path:
        """
        Write a password file (a random secret unless given) and return
        its path.
        """
        path = self.directory / "secrets" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text((secret or secrets.token_urlsafe(24)) + "\n")
        return path

    def router(
        self,
        name: str,
        *,
        label: str | None = None,
        listener: bool = True,
        listener_endpoint: str | None = None,
        keepalive_interval: int | str = KEEPALIVE_INTERVAL_MS,
        stage_valid_timeout: int | str = STAGE_VALID_TIMEOUT_MS,
        reject_disconnect_delay: int | str = REJECT_DISCONNECT_DELAY_MS,
        password_file: Path | None = None,
        connect: Iterable["RouterSpec | dict"] = (),
        admin: bool = True,
        clients: bool = False,
        routing: dict[str, object] | None = None,
        store: dict[str, object] | None = None,
        events: dict[str, object] | None = None,
    ) -> RouterSpec:
        """
        Describe a router and write its configuration file.

        @param label: when two processes use the same router name (an
            impostor), give the second a different label.
        @param listener: whether it has a routing listener.
        @param listener_endpoint: its endpoint string (plain TCP on
            127.0.0.1 by default); C{{port}} in it becomes a fresh port,
            which the spec then knows as C{routing_port}.
        @param connect: the routers it connects to: a L{RouterSpec} (a
            connector with the test defaults, see L{connector}) or a
            connector table from L{connector}.
        @param clients: whether it has a client listener (on a fresh port,
            which the spec then knows as C{client_port}).
        @param routing: keys of its C{[routing]} table, as an operator
            writes them (C{{"reroute-delay": "1s", "max-hops": 4}}).
        @param store: keys of its C{[store]} table (C{{"sync": "normal"}}).
        @param events: keys of its C{[events]} table
            (C{{"max-file-size": "1 MiB"}}).
        """
        label = label or name
        if any(spec.label == label for spec in self.specs):
            raise ValueError(f"label {label!r} is already used in this mesh")
        directory = self.directory / label
        routing_port = None
        listener_table = None
        if listener:
            if listener_endpoint is None:
                listener_endpoint = "tcp:{port}:interface=127.0.0.1"
            if "{port}" in listener_endpoint:
                routing_port = self.ports.allocate()
                listener_endpoint = listener_endpoint.replace("{port}", str(routing_port))
            listener_table = {
                "endpoint": listener_endpoint,
                "keepalive-interval": keepalive_interval,
                "stage-valid-timeout": stage_valid_timeout,
                "reject-disconnect-delay": reject_disconnect_delay,
                "password-file": password_file or self.password_file,
            }
        extra: dict[str, dict[str, object]] = {}
        client_port = None
        if clients:
            client_port = self.ports.allocate()
            extra["clients.listener"] = {"endpoint": f"tcp:{client_port}:interface=127.0.0.1"}
        if routing:
            extra["routing"] = dict(routing)
        if store:
            extra["store"] = dict(store)
        if events:
            extra["events"] = dict(events)
        spec = RouterSpec(
            name=name,
            label=label,
            directory=directory,
            admin_port=self.ports.allocate() if admin else None,
            routing_port=routing_port,
            router={"name": name, "data-dir": directory / "data"},
            listener=listener_table,
            connectors=[
                target if isinstance(target, dict) else self.connector(target)
                for target in connect
            ],
            extra=extra,
            client_port=client_port,
        )
        spec.write()
        self.specs.append(spec)
        return spec

    def connector(
        self,
        target: RouterSpec | None = None,
        *,
        router: str | None = None,
        endpoint: str | None = None,
        password_file: Path | None = None,
        **options: object,
    ) -> dict[str, object]:
        """
        A C{[[routing.connector]]} table reaching C{target} (or C{router}
        at C{endpoint}), with the test's short retry intervals.

        @param options: more keys, with C{_} for C{-}
            (C{reconnect_attempts=3}).
        """
        table: dict[str, object] = {
            "router": router or target.name,
            "endpoint": endpoint or target.routing_endpoint,
            "password-file": password_file or self.password_file,
            "retry-interval": RETRY_INTERVAL_MS,
            "max-retry-interval": MAX_RETRY_INTERVAL_MS,
            "stage-valid-timeout": STAGE_VALID_TIMEOUT_MS,
        }
        table.update({key.replace("_", "-"): value for key, value in options.items()})
        return table

    def spawn(self, spec: RouterSpec) -> RouterProcess:
        """
        Start C{spec}'s router without waiting for it.
        """
        spec.directory.mkdir(parents=True, exist_ok=True)
        with open(spec.output_path, "ab") as output:
            popen = subprocess.Popen(
                twistd_command(spec),
                cwd=spec.directory,
                env=router_env(),
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        process = RouterProcess(spec, popen)
        self.processes.append(process)
        return process

    def pair(self, name: str, witnesses: Iterable[RouterSpec],
             via: Callable[[str, str, int], int | None] | None = None, **ha: object,
             ) -> tuple[RouterSpec, RouterSpec]:
        """
        Describe the two instances of an HA pair of router C{name} (labels
        C{NAME-primary} and C{NAME-backup}), each with a client listener
        and a replication listener on fresh ports, voting with
        C{witnesses}; write their configuration files.

        @param via: puts a (cuttable) proxy on the way an instance dials
            its voters: C{via(role, target, port)} is called for each
            endpoint instance C{role} dials, C{target} being C{"peer"} (the
            other instance's replication listener: votes and, to the
            active, replication) or a witness's router name, C{port} the
            port it listens on; it returns the port to dial instead (a
            L{proxy.TcpProxy}'s), or None to dial it directly.
        @param ha: more keys of C{[ha]}, with C{_} for C{-}
            (C{lease_timeout="2s"}).
        """
        witnesses = list(witnesses)
        ports = {role: self.ports.allocate() for role in ("primary", "backup")}

        def endpoint(role: str, target: str, port: int) -> str:
            proxied = via(role, target, port) if via is not None else None
            return f"tcp:127.0.0.1:{port if proxied is None else proxied}"

        specs = []
        for role, other in (("primary", "backup"), ("backup", "primary")):
            spec = self.router(name, label=f"{name}-{role}", clients=True)
            spec.replication_port = ports[role]
            spec.extra["ha"] = {"role": role,
                                **{key.replace("_", "-"): value for key, value in ha.items()}}
            spec.extra["ha.replication"] = {
                "listener": f"tcp:{ports[role]}:interface=127.0.0.1",
                "peer": endpoint(role, "peer", ports[other]),
                "password-file": self.password_file,
            }
            spec.arrays["ha.witness"] = [
                {"router": witness.name,
                 "endpoint": endpoint(role, witness.name, witness.routing_port)}
                for witness in witnesses]
            spec.write()
            specs.append(spec)
        return specs[0], specs[1]

    def shared_pair(self, name: str, **ha: object) -> tuple[RouterSpec, RouterSpec]:
        """
        Describe the two instances of a shared-store pair of router C{name}
        (labels C{NAME-primary} and C{NAME-backup}) on one data dir, each
        with a client listener; the pair's client endpoints are both.

        @param ha: more keys of C{[ha]}, with C{_} for C{-}.
        """
        shared = self.directory / f"{name}-shared"
        specs = [self.router(name, label=f"{name}-{role}", clients=True)
                 for role in ("primary", "backup")]
        for role, spec in zip(("primary", "backup"), specs):
            spec.router["data-dir"] = str(shared)
            spec.instance_dir = shared / f"instance-{role}"
            spec.extra["ha"] = {
                "role": role, "policy": "shared-store",
                "client-endpoints": [other.client_endpoint for other in specs],
                **{key.replace("_", "-"): value for key, value in ha.items()}}
            spec.write()
        return specs[0], specs[1]

    def start(self, *specs: RouterSpec, timeout: float = READY_TIMEOUT_S) -> list[RouterProcess]:
        """
        Start routers in parallel and wait until each serves its admin API.
        """
        processes = [self.spawn(spec) for spec in specs]
        for process in processes:
            if process.spec.admin_port is not None:
                process.wait_ready(timeout)
        return processes

    def cleanup(self) -> None:
        """
        Kill every process still running: continue the stopped ones first
        (so that nothing lingers frozen), then SIGKILL, then reap.
        """
        for process in self.processes:
            if process.popen.poll() is None and process.stopped:
                process.sigcont()
        for process in self.processes:
            if process.popen.poll() is None:
                process.popen.kill()
        for process in self.processes:
            try:
                process.popen.wait(10)
            except subprocess.TimeoutExpired:
                pass
        for client in self.clients:
            client.kill()

    def report(self, lines: int = 40) -> list[tuple[str, str]]:
        """
        For a failure report: each router's exit status, printed output and
        log tail, as (title, text) sections.
        """
        sections = []
        for process in self.processes:
            status = process.popen.poll()
            if status is not None:
                state = f"exit {status}"
            else:
                state = "stopped" if process.stopped else "running"
            title = f"router {process.spec.label} (pid {process.pid}, {state})"
            output = tail(process.spec.output_path, lines)
            text = f"--- {process.spec.log_path}\n{tail(process.spec.log_path, lines)}\n"
            if output.strip():
                text += f"--- {process.spec.output_path}\n{output}\n"
            sections.append((title, text))
        for client in self.clients:
            status = client.popen.poll()
            title = f"{client.label} (pid {client.popen.pid}, " + (
                f"exit {status})" if status is not None else "running)"
            )
            text = (f"--- {' '.join(client.args)}\n--- stderr\n{tail(client.stderr_path, lines)}\n"
                    f"--- stdout\n{tail(client.stdout_path, 5)}\n")
            sections.append((title, text))
        return sections

    # -- clients ---------------------------------------------------------------

    def _client(self, label: str, args: list[str]) -> "ClientProcess":
        label = f"{label}-{len(self.clients) + 1}"
        client = ClientProcess(label, args, self.directory / "clients")
        self.clients.append(client)
        return client

    def send(self, router: "RouterProcess | RouterSpec", to: str, count: int = 1,
             *options: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
        """
        Run C{meshroute send --connect ROUTER --to TO --count COUNT
        [options]} and wait for it.
        """
        return run_cli("send", "--connect", router.client_endpoint, "--to", to,
                       "--count", str(count), *options, timeout=timeout)

    def start_send(self, router: "RouterProcess | RouterSpec", to: str, count: int = 1,
                   *options: str) -> "ClientProcess":
        """
        Start C{meshroute send} in the background (a separate producer
        process); see L{ClientProcess}.
        """
        return self._client("send", [
            "send", "--connect", router.client_endpoint, "--to", to, "--count", str(count),
            *options,
        ])

    def start_receive(self, router: "RouterProcess | RouterSpec", queue: str,
                      count: int | None = None, timeout: float | None = None,
                      *options: str) -> "ClientProcess":
        """
        Start C{meshroute receive --json} in the background (a separate
        consumer process); L{ClientProcess.messages} reads what it has
        printed so far.
        """
        return self._receive("receive", router, ["--queue", queue], count, timeout, options)

    def start_publish(self, router: "RouterProcess | RouterSpec", topic: str, count: int = 1,
                      *options: str) -> "ClientProcess":
        """
        Start C{meshroute send --topic TOPIC} in the background (a
        separate publisher process).
        """
        return self._client("publish", [
            "send", "--connect", router.client_endpoint, "--topic", topic, "--count",
            str(count), *options,
        ])

    def start_receive_topic(self, router: "RouterProcess | RouterSpec", pattern: str,
                            count: int | None = None, timeout: float | None = None,
                            *options: str) -> "ClientProcess":
        """
        Start C{meshroute receive --topic PATTERN --json} in the background
        (a subscriber process); as L{start_receive}.
        """
        return self._receive("subscribe", router, ["--topic", pattern], count, timeout, options)

    def _receive(self, label: str, router: "RouterProcess | RouterSpec", source: list[str],
                 count: int | None, timeout: float | None, options) -> "ClientProcess":
        args = ["receive", "--connect", router.client_endpoint, *source, "--json"]
        if count is not None:
            args += ["--count", str(count)]
        if timeout is not None:
            args += ["--timeout", f"{timeout:g}"]
        return self._client(label, [*args, *options])


_MESH_KEY = pytest.StashKey[Mesh]()


class _RouterLogReporter:
    """
    Adds the router logs of a test's L{Mesh} to its failure report, while
    the processes are still there to be described.
    """

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        mesh = item.stash.get(_MESH_KEY, None)
        if mesh is not None and report.failed:
            for title, text in mesh.report():
                report.sections.append((title, text))
        return report


@pytest.fixture
def mesh(request, tmp_path) -> Mesh:
    """
    A L{Mesh} under C{tmp_path}; every process it started is killed when the
    test ends, and a failed test's report shows the routers' log tails.
    """
    plugins = request.config.pluginmanager
    if not plugins.has_plugin("meshroute-router-logs"):
        plugins.register(_RouterLogReporter(), "meshroute-router-logs")
    the_mesh = Mesh(tmp_path)
    request.node.stash[_MESH_KEY] = the_mesh
    try:
        yield the_mesh
    finally:
        the_mesh.cleanup()
