"""
Transport settings every meshroute connection wants.
"""


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
