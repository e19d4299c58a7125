"""
Hostile clients of a real router's listener, whatever its protocol
(tests/processes/test_hostile_processes.py for the native listener,
tests/processes/test_mqtt_hostile_processes.py for MQTT), each a thread
until C{stop} is set, counting in a L{Tally} what it did and how the
router answered:

 - L{Slowloris} holds as many half-open connections as the listener
   allows, trickling a hello one byte at a time, and probes past the
   listener's C{max-connections};
 - L{Thrower} throws bytes that break the protocol, one throw per
   connection, and reads until the router closes it;
 - L{Flooder} says hello, then sends a burst of packets again and again
   and never reads what the router answers.

The protocol is in the bytes each is given; L{rss} measures the router.
"""

import selectors
import socket
import threading
from dataclasses import dataclass, field


def rss(pid: int) -> int:
    """
    A process's resident set size in bytes, from /proc.
    """
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.setblocking(False)
    return sock


@dataclass
class Tally:
    """
    What a hostile client did and what the router answered.
    """

    opened: int = 0
    refused: int = 0  # closed with limit-reached: max-connections (if the router said so)
    timed_out: int = 0  # closed with limit-reached: stage-valid-timeout (likewise)
    closed: int = 0  # closed by the router, any reason
    frames: int = 0
    bytes_sent: int = 0
    codes: dict = field(default_factory=dict)
    #: The client-side port of every connection, to find it in the router's log.
    ports: list = field(default_factory=list, repr=False)


class Slowloris(threading.Thread):
    """
    Holds up to C{max_connections} + 10 half-open connections, trickling
    one byte of C{hello} into each every tenth of a second.  Once the
    router closed 10 connections (C{refused}, or any C{closed} when the
    router says nothing before a hello: C{silent_refusals}) it holds
    C{max_connections} - C{reserved}, leaving room for the others
    (C{probed} is set).
    """

    def __init__(self, port: int, stop: threading.Event, hello: bytes, max_connections: int,
                 reserved: int, silent_refusals: bool = False) -> None:
        super().__init__(daemon=True)
        self.port, self.stop, self.hello = port, stop, hello
        self.max_connections, self.reserved = max_connections, reserved
        self.silent_refusals = silent_refusals
        self.target = max_connections + 10
        self.tally = Tally()
        self.held: dict[socket.socket, list] = {}  # socket → [bytes sent, bytes received]
        self.most_held = 0
        self.probed = threading.Event()
        self.selector = selectors.DefaultSelector()

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                self._fill()
                self._read(timeout=0.1)
                self._trickle()
                held = len(self.held)
                self.most_held = max(self.most_held, held)
                refusals = self.tally.closed if self.silent_refusals else self.tally.refused
                if not self.probed.is_set() and refusals >= 10:
                    # The limit held: from now on leave room for the others.
                    self.target = self.max_connections - self.reserved
                    for sock in list(self.held)[self.target:]:
                        self._forget(sock)
                    self.probed.set()
        finally:
            for sock in list(self.held):
                self._forget(sock)

    def _fill(self) -> None:
        while len(self.held) < self.target:
            try:
                sock = connect(self.port)
            except OSError:
                return
            self.held[sock] = [0, b""]
            self.selector.register(sock, selectors.EVENT_READ)
            self.tally.opened += 1
            self.tally.ports.append(sock.getsockname()[1])

    def _read(self, timeout: float) -> None:
        for key, _ in self.selector.select(timeout):
            sock = key.fileobj
            try:
                data = sock.recv(65536)
            except OSError:
                data = b""
            if data:
                self.held[sock][1] += data
                continue
            received = self.held[sock][1]
            self.tally.closed += 1
            if b"max-connections" in received:
                self.tally.refused += 1
            elif b"stage-valid-timeout" in received:
                self.tally.timed_out += 1
            self._forget(sock)

    def _trickle(self) -> None:
        for sock, state in list(self.held.items()):
            sent = state[0]
            if sent < len(self.hello) - 1:
                try:
                    state[0] += sock.send(self.hello[sent:sent + 1])
                    self.tally.bytes_sent += 1
                except OSError:
                    pass

    def _forget(self, sock: socket.socket) -> None:
        self.held.pop(sock, None)
        try:
            self.selector.unregister(sock)
        except (KeyError, ValueError):
            pass
        sock.close()


class Thrower(threading.Thread):
    """
    Connects again and again, throws the next of C{throws} and reads until
    the router closes the connection; counts the answers holding each of
    C{codes} (bytes the router's refusals carry).
    """

    def __init__(self, port: int, stop: threading.Event, throws: list[bytes],
                 codes: tuple[bytes, ...] = ()) -> None:
        super().__init__(daemon=True)
        self.port, self.stop, self.throws, self.codes = port, stop, throws, codes
        self.tally = Tally()

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            throw = self.throws[n % len(self.throws)]
            n += 1
            try:
                sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
            except OSError:
                continue
            with sock:
                self.tally.opened += 1
                self.tally.ports.append(sock.getsockname()[1])
                try:
                    sock.sendall(throw)
                    self.tally.bytes_sent += len(throw)
                    self.tally.frames += 1
                    received = b""
                    while chunk := sock.recv(65536):
                        received += chunk
                except OSError:
                    received = b""
            self.tally.closed += 1
            for code in self.codes:
                if code in received:
                    self.tally.codes[code.decode()] = self.tally.codes.get(code.decode(), 0) + 1


class Flooder(threading.Thread):
    """
    Sends C{hello}, then C{burst} (packets of C{packet_size} bytes) as
    fast as the router takes it, never reading: what the router answers
    piles up, on the router's side unless it stops reading a client that
    does not read (C{stalled}: a send timed out).  Ends at C{most} bytes
    (with C{hold}, it then holds the connection, silent, until C{stop}),
    or when the router closes the connection (C{tally.closed}).
    """

    def __init__(self, port: int, stop: threading.Event, hello: bytes, burst: bytes,
                 packet_size: int, most: int, hold: bool = False) -> None:
        super().__init__(daemon=True)
        self.port, self.stop, self.most, self.hold = port, stop, most, hold
        self.hello, self.burst, self.packet_size = hello, burst, packet_size
        self.tally = Tally()
        self.stalled = threading.Event()

    def run(self) -> None:
        with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
            sock.sendall(self.hello)
            self.tally.opened += 1
            self.tally.ports.append(sock.getsockname()[1])
            while not self.stop.is_set() and self.tally.bytes_sent < self.most:
                try:
                    sent = sock.send(self.burst)
                except socket.timeout:
                    self.stalled.set()  # the router stopped reading us: good
                    continue
                except OSError:
                    self.tally.closed += 1
                    return
                self.tally.bytes_sent += sent
                self.tally.frames += sent // self.packet_size
            if self.hold:
                self.stop.wait()
