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
