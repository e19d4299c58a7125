"""
Free TCP ports on 127.0.0.1 for routers and brokers that tests and
benchmarks start: L{PortAllocator}.
"""

import random
import socket


class PortAllocator:
    """
    Hands out free TCP ports on 127.0.0.1, each at most once per session.

    Ports come from below the kernel's ephemeral range
    (C{ip_local_port_range}), in a slice of their own for each pytest-xdist
    worker.  A port bound 0 hands out from the ephemeral range is free only
    until the next outgoing connection anywhere on the machine takes it as
    its local port, or another worker's probe gets it too: a router started
    a moment later then fails with "address already in use".  Below that
    range only a listener can hold a port, and the bind probe here sees it.
    """

    #: The lowest port handed out: above the fixed ports of etc/lab (6001-8114)
    #: and the protocols' well-known ones (1883, 5672, 8883).
    LOWEST = 20000

    def __init__(self, worker: int = 0, workers: int = 1) -> None:
        top = min(_ephemeral_low(), 32768)
        width = (top - self.LOWEST) // max(workers, 1)
        self._low = self.LOWEST + worker * width
        self._width = width
        # A random start, so two sessions on one machine seldom probe the
        # same ports in the same order.
        self._next = random.randrange(width)
        self._given: set[int] = set()

    def allocate(self) -> int:
        for _ in range(self._width):
            port = self._low + self._next
            self._next = (self._next + 1) % self._width
            if port in self._given and len(self._given) < self._width:
                continue
            if _free(port):
                self._given.add(port)
                return port
        raise RuntimeError(f"no free port in {self._low}-{self._low + self._width - 1}")


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as ranges:
            return int(ranges.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # As Twisted's listeners do, so a port in TIME_WAIT counts as free.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
