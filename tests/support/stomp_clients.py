"""
stomp.py clients of real routers, for the STOMP end-to-end tests
(tests/processes/test_stomp_processes.py, test_stomp_topics_processes.py):
a router with a STOMP listener (L{stomp_router}), a connection to it
(L{connect}) and what it received (L{Collector}), and the README's stomp.py
examples, word for word (L{readme_example}).
"""

import threading

import stomp

from support.routers import REPO_ROOT, wait_until

#: Deadlines: generous, for a loaded 2-core machine.
TIMEOUT_S = 60.0


class Collector(stomp.ConnectionListener):
    """
    What one stomp.py connection received (its listener's callbacks run on
    stomp.py's receiver thread; appending to a list is atomic).
    """

    def __init__(self) -> None:
        self.connected: list = []
        self.messages: list = []
        self.receipts: list[str] = []
        self.errors: list = []
        self.heartbeats = 0
        self.disconnected = threading.Event()

    def on_connected(self, frame) -> None:
        self.connected.append(frame)

    def on_message(self, frame) -> None:
        self.messages.append(frame)

    def on_receipt(self, frame) -> None:
        self.receipts.append(frame.headers["receipt-id"])

    def on_error(self, frame) -> None:
        self.errors.append(frame)

    def on_heartbeat(self) -> None:
        self.heartbeats += 1

    def on_disconnected(self) -> None:
        self.disconnected.set()

    def wait_messages(self, n: int, timeout: float = TIMEOUT_S) -> list:
        wait_until(lambda: len(self.messages) >= n, timeout,
                   what=f"{n} messages (have {len(self.messages)})")
        return self.messages

    def wait_receipt(self, receipt: str, timeout: float = TIMEOUT_S) -> None:
        wait_until(lambda: receipt in self.receipts, timeout, what=f"receipt {receipt}")


def stomp_router(mesh, name: str, connect=(), **stomp_keys):
    """
    A router with a client listener and a STOMP listener on fresh ports
    (the STOMP port is C{spec.stomp_port}), short TTL checks (the STOMP
    listener's are the client listener's C{connection-ttl-check-interval}).
    """
    spec = mesh.router(name, clients=True, connect=connect)
    spec.stomp_port = mesh.ports.allocate()
    spec.extra["stomp.listener"] = {
        "endpoint": f"tcp:{spec.stomp_port}:interface=127.0.0.1",
        **{key.replace("_", "-"): value for key, value in stomp_keys.items()},
    }
    spec.extra["clients.listener"]["connection-ttl-check-interval"] = "200ms"
    spec.write()
    return spec


def connect(spec, *, heartbeats=(0, 0), **options) -> tuple[stomp.Connection, Collector]:
    """
    A stomp.py connection to C{spec}'s STOMP listener, connected.
    """
    connection = stomp.Connection12([("127.0.0.1", spec.stomp_port)], heartbeats=heartbeats,
                                  auto_decode=False)
    collector = Collector()
    connection.set_listener("collector", collector)
    connection.connect(wait=True, **options)
    return connection, collector


def readme_example(destination: str) -> str:
    """
    The README's stomp.py example that uses C{destination}: a Python block
    of "From other languages".
    """
    readme = (REPO_ROOT / "README.md").read_text()
    section = readme[readme.index("## From other languages"):]
    start = 0
    while True:
        start = section.index("```python\n", start) + len("```python\n")
        block = section[start:section.index("```", start)]
        if f'"{destination}"' in block:
            return block
