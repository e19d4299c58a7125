"""
A TCP proxy on 127.0.0.1 that tests can cut and restore, to put a network
failure between a client and a router (Diffusion's advice for testing
reconnection: kill the proxy, start it again).

It runs in a thread of the test process with plain non-blocking sockets
and a selector::

    with TcpProxy(router.spec.client_port) as proxy:
        client = start(..., f"tcp:127.0.0.1:{proxy.port}")
        proxy.cut()       # every connection closed, nothing listens
        proxy.restore()   # listens again on the same port

L{TcpProxy.cut} closes every proxied connection (both sides) and the
listening socket, so reconnection attempts meet "connection refused"
until L{TcpProxy.restore} listens again on the same port.

L{TcpProxy.mute} loses what the target says: from then on its bytes are
read and dropped, as answers lost on the wire would be (the client
hears nothing more, while its own bytes still reach the target).

L{TcpProxy.hold} delays instead of refusing: connections are accepted
but not forwarded, what their clients send waits unread, until
L{TcpProxy.release} connects them to the target and passes it on (a
frame sent at one moment that arrives at a later one)::

    proxy.hold()
    ...               # the client connects and writes; nothing arrives
    proxy.release()   # now it does
"""

import errno
import selectors
import socket
import threading
import time

_HOST = "127.0.0.1"
_CHUNK = 65536
#: Stop reading from one side while this much waits to go to the other.
_HIGH_WATER = 1 << 20


class _Pipe:
    """
    One proxied connection: the client's socket and the target's, and what
    each direction still has to write.
    """

    def __init__(self, client: socket.socket, target: socket.socket) -> None:
        self.client = client
        self.target = target
        self.pending = {client: bytearray(), target: bytearray()}  # to write to that socket

    def peer(self, sock: socket.socket) -> socket.socket:
        return self.target if sock is self.client else self.client


class TcpProxy:
    """
    Forwards connections made to C{127.0.0.1:port} to
    C{127.0.0.1:target_port}.

    @ivar port: the port it listens on (ephemeral, kept across cut/restore).
    @ivar connections: how many connections it accepted in all.
    @ivar accepted_at: when (C{time.monotonic()}) it accepted each, in
        order: when a client's attempt reached it.
    @ivar cuts: how many times it was cut.
    """

    def __init__(self, target_port: int, port: int = 0) -> None:
        self.target_port = target_port
        self.port = port
        self.connections = 0
        self.accepted_at: list[float] = []
        self.cuts = 0
        self._last_from_client: float | None = None
        self._lock = threading.Lock()
        self._selector = selectors.DefaultSelector()
        self._pipes: dict[socket.socket, _Pipe] = {}
        self._listener: socket.socket | None = None
        self._holding = False
        self._muted = False
        self._held: list[socket.socket] = []
        self._requests: list = []
        self._stopping = False
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._listen()
        self._thread = threading.Thread(target=self._run, name=f"proxy:{self.port}", daemon=True)
        self._thread.start()

    def __enter__(self) -> "TcpProxy":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def endpoint(self) -> str:
        "The client endpoint string that reaches the target through the proxy."
        return f"tcp:{_HOST}:{self.port}"

    @property
    def listening(self) -> bool:
        return self._listener is not None

    def last_from_client(self) -> float | None:
        """
        When (epoch seconds, C{time.time()}) the proxy last read bytes from
        a client, to forward them to the target; None if never.
        """
        return self._last_from_client

    def open_connections(self) -> int:
        "How many proxied connections are open now."
        with self._lock:
            return len({id(p) for p in self._pipes.values()})

    def held_connections(self) -> int:
        "How many accepted connections wait for L{release}."
        with self._lock:
            return len(self._held)

    # -- control (any thread) ----------------------------------------------------

    def cut(self) -> None:
        """
        Close every proxied connection and stop listening; returns once done.
        """
        self._call(self._do_cut)

    def restore(self) -> None:
        """
        Listen again on the same port; returns once listening.
        """
        self._call(self._listen_in_loop)

    def mute(self) -> None:
        """
        From now on, drop what the targets send (returns once it is so).
        """
        self._call(self._do_mute)

    def hold(self) -> None:
        """
        From now on, accept connections but forward nothing of them (not
        even the connection: the target hears of it at L{release}).
        """
        self._call(self._do_hold)

    def release(self) -> None:
        """
        Connect every held connection to the target, forward what its
        client sent meanwhile, and forward new connections at once again.
        """
        self._call(self._do_release)

    def close(self) -> None:
        """
        Cut, and stop the thread.
        """
        if self._thread.is_alive():
            self._call(self._do_stop)
            self._thread.join(5)
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()

    def _call(self, function) -> None:
        done = threading.Event()
        errors: list[BaseException] = []

        def request():
            try:
                function()
            except BaseException as e:  # reported to the caller
                errors.append(e)
            finally:
                done.set()

        with self._lock:
            self._requests.append(request)
        self._wake_w.send(b"x")
        if not done.wait(10):
            raise RuntimeError("the proxy thread did not answer")
        if errors:
            raise errors[0]

    # -- the proxy thread ----------------------------------------------------------

    def _listen(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((_HOST, self.port))
        listener.listen(64)
        listener.setblocking(False)
        self.port = listener.getsockname()[1]
        self._listener = listener
        self._selector.register(listener, selectors.EVENT_READ, "accept")

    def _listen_in_loop(self) -> None:
        if self._listener is None:
            self._listen()

    def _do_hold(self) -> None:
        self._holding = True

    def _do_mute(self) -> None:
        self._muted = True

    def _do_release(self) -> None:
        self._holding = False
        with self._lock:
            held, self._held = self._held, []
        for client in held:
            self._forward(client)

    def _do_cut(self) -> None:
        self.cuts += 1
        with self._lock:
            held, self._held = self._held, []
        for client in held:
            client.close()
        if self._listener is not None:
            self._selector.unregister(self._listener)
            self._listener.close()
            self._listener = None
        for pipe in {id(p): p for p in self._pipes.values()}.values():
            self._close_pipe(pipe, reset=True)

    def _do_stop(self) -> None:
        self._do_cut()
        self._stopping = True

    def _close_pipe(self, pipe: _Pipe, reset: bool = False) -> None:
        for sock in (pipe.client, pipe.target):
            with self._lock:
                known = self._pipes.pop(sock, None) is not None
            if not known:
                continue
            try:
                self._selector.unregister(sock)
            except (KeyError, ValueError):
                pass
            if reset:
                # RST rather than FIN: the peer sees the connection fail.
                try:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                    b"\x01\x00\x00\x00\x00\x00\x00\x00")
                except OSError:
                    pass
            sock.close()

    def _accept(self) -> None:
        try:
            client, _ = self._listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        self.accepted_at.append(time.monotonic())
        if self._holding:
            with self._lock:
                self._held.append(client)
            return
        self._forward(client)

    def _forward(self, client: socket.socket) -> None:
        target = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            target.connect((_HOST, self.target_port))
        except OSError:
            target.close()
            client.close()
            return
        for sock in (client, target):
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pipe = _Pipe(client, target)
        with self._lock:
            self._pipes[client] = pipe
            self._pipes[target] = pipe
            self.connections += 1
        self._selector.register(client, selectors.EVENT_READ, pipe)
        self._selector.register(target, selectors.EVENT_READ, pipe)

    def _update_interest(self, pipe: _Pipe) -> None:
        for sock in (pipe.client, pipe.target):
            events = 0
            if len(pipe.pending[pipe.peer(sock)]) < _HIGH_WATER:
                events |= selectors.EVENT_READ
            if pipe.pending[sock]:
                events |= selectors.EVENT_WRITE
            try:
                current = self._selector.get_key(sock).events
            except KeyError:
                current = 0
            if events == current:
                continue
            if not events:
                self._selector.unregister(sock)
            elif not current:
                self._selector.register(sock, events, pipe)
            else:
                self._selector.modify(sock, events, pipe)

    def _readable(self, sock: socket.socket, pipe: _Pipe) -> bool:
        try:
            data = sock.recv(_CHUNK)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            return False
        if not data:
            return False
        if sock is pipe.client:
            self._last_from_client = time.time()
        elif self._muted:
            return True
        pipe.pending[pipe.peer(sock)] += data
        return self._writable(pipe.peer(sock), pipe)

    def _writable(self, sock: socket.socket, pipe: _Pipe) -> bool:
        buffer = pipe.pending[sock]
        while buffer:
            try:
                sent = sock.send(buffer)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as e:
                if e.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
                    break
                return False
            del buffer[:sent]
        return True

    def _run(self) -> None:
        while not self._stopping:
            for key, events in self._selector.select(1.0):
                if key.data == "wake":
                    try:
                        self._wake_r.recv(4096)
                    except BlockingIOError:
                        pass
                    with self._lock:
                        requests, self._requests = self._requests, []
                    for request in requests:
                        request()
                    continue
                if key.data == "accept":
                    if self._listener is not None:
                        self._accept()
                    continue
                pipe = key.data
                sock = key.fileobj
                with self._lock:
                    if sock not in self._pipes:
                        continue  # closed earlier in this round
                ok = True
                if events & selectors.EVENT_WRITE:
                    ok = self._writable(sock, pipe)
                if ok and events & selectors.EVENT_READ:
                    ok = self._readable(sock, pipe)
                if ok:
                    self._update_interest(pipe)
                else:
                    # One side closed or failed: close both (a half-open
                    # connection is of no use to these protocols).
                    self._close_pipe(pipe)
