"""
Clients that connect while a real router process starts (issue 26): its
listeners are bound before its store is open, and a connection that
arrives in between must be served once the router is ready, never closed
without a word.

The window is made wide on purpose, without any hook in the router: the
test holds a write lock on the router's C{store.db} (a SQLite exclusive
transaction), so the router's store waits for it (its busy timeout) while
its ports are already bound.  The router's admin API answers meanwhile,
saying it does not serve yet; an answer from it also shows that the
router's reactor has turned since the test's connections were made, so
an old router would have accepted and closed them by then.
"""

import socket
import sqlite3

from meshroute.stomp.settings import DEFAULT_WEBSOCKET_PATH
from meshroute.wire import client_frames as f
from meshroute.wire import frames
from meshroute.wire.codec import FrameDecoder, encode
from support.routers import mesh  # noqa: F401 (mesh is a fixture)

#: How long a held connection may wait for its answer, on a loaded machine.
ANSWER_TIMEOUT_S = 30.0

STOMP_CONNECT = b"CONNECT\naccept-version:1.2\nhost:router-a\n\n\x00"

#: A WebSocket upgrade offering STOMP 1.2, then STOMP_CONNECT in one
#: masked text message (RFC 6455; a zero mask leaves the payload as is).
WEBSOCKET_CONNECT = (
    f"GET {DEFAULT_WEBSOCKET_PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
    "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: v12.stomp\r\n\r\n"
).encode() + bytes([0x81, 0x80 | len(STOMP_CONNECT)]) + bytes(4) + STOMP_CONNECT


def read_until(sock: socket.socket, complete) -> bytes:
    """
    What the router wrote on C{sock} until C{complete(data)} holds, or
    until it closed the connection (a reset included): then what came
    before the close, C{b""} for a bare close.
    """
    data = b""
    while not complete(data):
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    return data


def first_frame(frame_set):
    """
    A C{read_until} condition: C{data} holds a whole frame of C{frame_set}.
    """
    return lambda data: bool(FrameDecoder(frames=frame_set).feed(data))


def stomp_over_websocket(data: bytes) -> bytes:
    """
    The payload of the first WebSocket message after a successful upgrade
    (C{101}) in C{data}, the router's side of the connection; C{b""} when
    there is none.
    """
    head, _, messages = data.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 101 ") or messages[:1] != b"\x81":
        return b""
    # An unmasked text message: its length in 7 bits, or 16 or 64 more.
    length = messages[1] & 0x7F
    return messages[{126: 4, 127: 10}.get(length, 2):]


def test_clients_connecting_while_the_router_starts_are_served_once_it_is_ready(mesh):
    """
    From the moment the process is spawned, connect to each listener
    (routing, native client, STOMP over TCP and over WebSocket) until the
    port takes the connection, and send the protocol's first frame: each
    of these first connections is answered once the store is open
    (C{Welcome}, C{Opened}, C{CONNECTED}), none is closed bare.
    """
    spec = mesh.router("router-a", clients=True)
    stomp_port, websocket_port = mesh.ports.allocate(), mesh.ports.allocate()
    spec.extra["stomp.listener"] = {
        "endpoint": f"tcp:{stomp_port}:interface=127.0.0.1",
        "websocket": f"tcp:{websocket_port}:interface=127.0.0.1",
    }
    spec.write()
    spec.data_dir.mkdir(parents=True)
    lock = sqlite3.connect(spec.store_path, isolation_level=None)
    lock.execute("BEGIN EXCLUSIVE")
    process = mesh.spawn(spec)
    first = {
        "routing": (spec.routing_port, encode(frames.Hello([2, 3, 4], "router-x"))),
        "native": (spec.client_port, encode(f.Open([1], "early", "", 60000))),
        "stomp": (stomp_port, STOMP_CONNECT),
        "websocket": (websocket_port, WEBSOCKET_CONNECT),
    }
    connections = {}
    try:
        for kind, (port, hello) in first.items():
            connections[kind] = process.wait_for(
                lambda: socket.create_connection(("127.0.0.1", port), timeout=ANSWER_TIMEOUT_S),
                timeout=30, what=f"the {kind} listener to take a connection")
            connections[kind].sendall(hello)
        info = process.wait_for(process.info, what="the admin API")
        assert info["serving"] is False, \
            "the store opened before the connections were made: the test proves nothing"
        lock.execute("ROLLBACK")
        lock.close()
        answers = {
            "routing": read_until(connections["routing"], first_frame(frames.LINK_FRAMES)),
            "native": read_until(connections["native"], first_frame(f.FROM_ROUTER)),
            "stomp": read_until(connections["stomp"], lambda data: b"\x00" in data),
            "websocket": read_until(connections["websocket"], lambda data: b"\x00" in data),
        }
    finally:
        lock.close()
        for connection in connections.values():
            connection.close()
    assert {
        "routing": [type(frame).__name__ for frame in FrameDecoder().feed(answers["routing"])],
        "native": [type(frame).__name__
                   for frame in FrameDecoder(frames=f.FROM_ROUTER).feed(answers["native"])],
        "stomp": answers["stomp"].split(b"\n", 1)[0],
        "websocket": stomp_over_websocket(answers["websocket"]).split(b"\n", 1)[0],
    } == {"routing": ["Welcome"], "native": ["Opened"], "stomp": b"CONNECTED",
          "websocket": b"CONNECTED"}, answers
    process.wait_ready()
