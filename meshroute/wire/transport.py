"""
Transport settings every meshroute connection wants, and how a log names
the far end of one.
"""

from twisted.internet.address import IPv4Address, IPv6Address, UNIXAddress


def peer_address(transport) -> str:
    """
    The remote address of C{transport} as an operator reads it:
    C{HOST:PORT} (C{[HOST]:PORT} for IPv6), a UNIX socket's path, or the
    address's own text for anything else.
    """
    address = transport.getPeer()
    if isinstance(address, IPv4Address):
        return f"{address.host}:{address.port}"
    if isinstance(address, IPv6Address):
        return f"[{address.host}]:{address.port}"
    if isinstance(address, UNIXAddress):
        name = address.name
        return name.decode(errors="replace") if isinstance(name, bytes) else str(name or "unix")
    return str(address)



def send_immediately(transport) -> None:
    """
    Turn off Nagle's algorithm where the transport has it (TCP, and TLS
    over TCP).

    Our frames are small and each side often waits for the other's answer
    (a confirmation, an acknowledgement): with Nagle on, a small write
    waits for the peer's delayed ACK, adding tens of milliseconds to
    every exchange.
    """
    set_no_delay = getattr(transport, "setTcpNoDelay", None)
    if set_no_delay is not None:
        try:
            set_no_delay(True)
        except OSError:
            pass


def flush_now(transport) -> None:
    """
    Hand the bytes written to C{transport} to the kernel now, not when the
    reactor next polls its socket.

    A Twisted transport buffers a write until the reactor's next poll
    finds its socket writable, and that poll's other ready sockets may be
    read and handled first.  The frames a turn gathers and writes at its
    end (a batch of transfers, of deliveries, an acknowledgement) are what
    the next hop or the client waits for; written out at once they leave
    before the next turn's work, and without a poll of their own
    (benchmarks/README.md, "Frames written out at the end of their turn").

    Does what the reactor would (L{IWriteDescriptor.doWrite}): what the
    kernel does not take yet stays buffered for the reactor, and an error
    is left for its next poll to find: the socket stays registered for
    writing, and the reactor's own C{doWrite} meets the error again.
    Nothing is done for a transport without a socket of its own: a
    test's, a WebSocket's, or TLS, whose layer gathers a turn's small
    writes and hands them on in the next turn by itself.  Nor for one
    that is closing (the reactor ends it once its buffer is written), or
    whose producer is paused (its buffer is full: the reactor resumes the
    producer, outside any call of ours).
    """
    if not hasattr(transport, "doWrite"):
        return
    if not transport.connected or transport.disconnecting or transport.producerPaused:
        return
    transport.doWrite()
