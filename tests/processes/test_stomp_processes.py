"""
The STOMP listener end to end: real C{twistd} routers on 127.0.0.1, and
clients no one here wrote: stomp.py (Python), autobahn's WebSocket client
speaking STOMP as a browser does, beside the native client commands
(C{meshroute send} / C{meshroute receive}).

What the clients see is what stomp.py's listener collected; what the
routers did is read from their admin API and event log.  Synchronisation
is a poll against a deadline, never a sleep.
"""

import base64
import json
import shutil
import signal
import socket
import subprocess
import sys
import textwrap

import pytest
import stomp

from support.certificates import make_ca, make_client_cert, make_server_cert
from meshroute.security.credentials import derive
from meshroute.security.users import write_users
from support.routers import (  # noqa: F401 (mesh is a fixture)
    ClientProcess, mesh, router_env, run_cli, wait_until)
from support.stomp_clients import TIMEOUT_S, Collector, connect, readme_example, stomp_router

BULK_TIMEOUT_S = 240.0
BULK = 10_000


def ipv6_loopback() -> bool:
    """
    Whether this machine can listen on ::1.
    """
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


def stomp_sessions(process) -> list[dict]:
    return [s for s in process.get("/api/v1/sessions") if s["protocol"] == "stomp"]


def test_sends_two_hops_away_are_receipted_and_received_in_each_ack_mode(mesh):
    c = stomp_router(mesh, "router-c")
    b = mesh.router("router-b", connect=[c])
    a = stomp_router(mesh, "router-a", connect=[b])
    a_proc, _, c_proc = mesh.start(a, b, c)
    a_proc.wait_route("router-c")
    producer, sent = connect(a, headers={"client-id": "producer"})
    modes = ("auto", "client", "client-individual")
    for mode in modes:
        for i in range(3):
            producer.send(f"/queue/{mode}@router-c", f"{mode} {i}".encode(),
                          content_type="text/plain", receipt=f"{mode}-{i}",
                          headers={"x-mode": mode})
    for mode in modes:
        sent.wait_receipt(f"{mode}-2")
    assert sorted(sent.receipts) == sorted(f"{m}-{i}" for m in modes for i in range(3))
    (session,) = stomp_sessions(a_proc)
    assert session["client_id"] == "producer" and session["state"] == "open"

    consumer, got = connect(c)
    for mode in modes:
        consumer.subscribe(f"/queue/{mode}", id=mode, ack=mode)
    messages = got.wait_messages(9)
    by_mode = {mode: [m for m in messages if m.headers["subscription"] == mode]
               for mode in modes}
    for mode, received in by_mode.items():
        assert [m.body for m in received] == [f"{mode} {i}".encode() for i in range(3)]
        assert all(m.headers["content-type"] == "text/plain" for m in received)
        assert all(m.headers["x-mode"] == mode for m in received)
    consumer.ack(by_mode["client"][-1].headers["ack"], receipt="acked-client")
    for m in by_mode["client-individual"]:
        consumer.ack(m.headers["ack"], receipt=m.headers["ack"])
    got.wait_receipt("acked-client")
    got.wait_receipt(by_mode["client-individual"][-1].headers["ack"])
    wait_until(lambda: all(c_proc.queue_depth(mode) == 0 for mode in modes), TIMEOUT_S,
               what="every queue on router-c to be empty")
    consumed = c_proc.events("message.consumed")
    assert len(consumed) == 9
    producer.disconnect()
    consumer.disconnect()
    wait_until(lambda: not stomp_sessions(c_proc), TIMEOUT_S, what="the session to close")
    assert [e["protocol"] for e in a_proc.events("session.opened")] == ["stomp"]


def test_nack_redelivers_flagged_redelivered(mesh):
    a = stomp_router(mesh, "router-a")
    (a_proc,) = mesh.start(a)
    connection, got = connect(a)
    connection.send("/queue/q", b"once more", receipt="sent")
    got.wait_receipt("sent")
    connection.subscribe("/queue/q", id="s", ack="client-individual")
    (first,) = got.wait_messages(1)
    assert "redelivered" not in first.headers
    connection.nack(first.headers["ack"])
    second = got.wait_messages(2)[1]
    assert second.headers["message-id"] == first.headers["message-id"]
    assert second.headers["redelivered"] == "true"
    connection.ack(second.headers["ack"], receipt="done")
    got.wait_receipt("done")
    wait_until(lambda: a_proc.queue_depth("q") == 0, TIMEOUT_S, what="q to be empty")
    connection.disconnect()


def test_transactions_commit_and_abort(mesh):
    a = stomp_router(mesh, "router-a")
    (a_proc,) = mesh.start(a)
    connection, got = connect(a)
    aborted = connection.begin()
    for i in range(3):
        connection.send("/queue/t", f"aborted {i}".encode(), transaction=aborted)
    connection.abort(aborted, receipt="aborted")
    committed = connection.begin()
    for i in range(3):
        connection.send("/queue/t", f"committed {i}".encode(), transaction=committed)
    connection.commit(committed, receipt="committed")
    got.wait_receipt("committed")
    assert "aborted" in got.receipts
    connection.subscribe("/queue/t", id="s", ack="client")
    messages = got.wait_messages(3)
    # An ACK in a transaction that aborts gives the message back.
    undo = connection.begin()
    connection.ack(messages[-1].headers["ack"], transaction=undo)
    connection.abort(undo, receipt="undone")
    got.wait_receipt("undone")
    redelivered = got.wait_messages(6)[3:]
    assert [m.body for m in redelivered] == [f"committed {i}".encode() for i in range(3)]
    assert all(m.headers["redelivered"] == "true" for m in redelivered)
    assert got.errors == []
    keep = connection.begin()
    connection.ack(redelivered[-1].headers["ack"], transaction=keep)
    connection.commit(keep, receipt="kept")
    got.wait_receipt("kept")
    wait_until(lambda: a_proc.queue_depth("t") == 0, TIMEOUT_S, what="t to be empty")
    assert len(a_proc.events("message.accepted")) == 3
    connection.disconnect()


#: A STOMP client in a process of its own, to be frozen: it connects with
#: heart-beats and then waits to be killed.
_FROZEN_CLIENT = textwrap.dedent("""
    import sys, threading, stomp
    connection = stomp.Connection12([("127.0.0.1", int(sys.argv[1]))], heartbeats=(500, 500))
    connection.connect(wait=True, headers={"client-id": "frozen"})
    print("connected", flush=True)
    threading.Event().wait()
""")


def test_heart_beats_keep_an_idle_connection_and_a_frozen_client_is_closed(mesh):
    a = stomp_router(mesh, "router-a", heart_beat="500,500")
    (a_proc,) = mesh.start(a)
    idle, got = connect(a, heartbeats=(500, 500), headers={"client-id": "idle"})
    (session,) = stomp_sessions(a_proc)
    assert session["ttl_ms"] == 1000
    # Ten of the router's heart-beats: five seconds, five TTLs, idle.
    wait_until(lambda: got.heartbeats >= 10, TIMEOUT_S, what="the router's heart-beats")
    assert [s["client_id"] for s in stomp_sessions(a_proc)] == ["idle"]

    frozen = ClientProcess("frozen", [str(a.stomp_port)], mesh.directory / "clients",
                           program=[sys.executable, "-c", _FROZEN_CLIENT])
    mesh.clients.append(frozen)
    wait_until(lambda: "connected" in frozen.stdout, TIMEOUT_S, what="the client to connect")
    wait_until(lambda: any(s["client_id"] == "frozen" for s in stomp_sessions(a_proc)),
               TIMEOUT_S, what="the frozen client's session")
    frozen.popen.send_signal(signal.SIGSTOP)
    try:
        wait_until(lambda: [s["client_id"] for s in stomp_sessions(a_proc)] == ["idle"],
                   TIMEOUT_S, what="the frozen client's session to end")
        (disconnected,) = a_proc.events("session.disconnected")
        assert disconnected["reason"] == "ttl"
    finally:
        frozen.popen.send_signal(signal.SIGCONT)
        frozen.kill()
    assert not got.disconnected.is_set()
    idle.disconnect()


def test_ten_thousand_stomp_messages_reach_a_native_consumer_exactly_once(mesh):
    c = stomp_router(mesh, "router-c")
    a = stomp_router(mesh, "router-a", connect=[c])
    a_proc, c_proc = mesh.start(a, c)
    a_proc.wait_route("router-c")
    consumer = mesh.start_receive(c_proc, "bulk", BULK, BULK_TIMEOUT_S)
    producer, sent = connect(a)
    for i in range(BULK - 1):
        producer.send("/queue/bulk@router-c", b"m%d" % i, content_type="text/plain")
    producer.send("/queue/bulk@router-c", b"m%d" % (BULK - 1), content_type="text/plain",
                  receipt="last")
    sent.wait_receipt("last", BULK_TIMEOUT_S)
    assert consumer.wait(BULK_TIMEOUT_S) == 0
    messages = consumer.messages()
    bodies = [m["body"] for m in messages]
    assert len(bodies) == BULK and set(bodies) == {f"m{i}" for i in range(BULK)}
    assert all(m["headers"]["content-type"] == "text/plain" for m in messages)
    assert sent.errors == []
    producer.disconnect()


def test_ten_thousand_native_messages_reach_a_stomp_consumer_exactly_once(mesh):
    c = stomp_router(mesh, "router-c")
    a = stomp_router(mesh, "router-a", connect=[c])
    a_proc, c_proc = mesh.start(a, c)
    a_proc.wait_route("router-c")
    consumer, got = connect(c)
    consumer.subscribe("/queue/bulk", id="bulk", ack="client",
                       headers={"prefetch-count": "1000"})
    acked = 0

    def all_received_and_acked():
        nonlocal acked
        messages = got.messages
        if len(messages) >= acked + 500 or len(messages) == BULK:
            if len(messages) > acked:
                consumer.ack(messages[len(messages) - 1].headers["ack"])
                acked = len(messages)
        return acked >= BULK

    assert mesh.send(a_proc, "bulk@router-c", BULK, timeout=BULK_TIMEOUT_S).returncode == 0
    wait_until(all_received_and_acked, BULK_TIMEOUT_S, what=f"{BULK} messages")
    bodies = [m.body for m in got.messages]
    assert len(bodies) == BULK and len(set(bodies)) == BULK
    wait_until(lambda: c_proc.queue_depth("bulk") == 0, TIMEOUT_S, what="bulk to be empty")
    consumer.disconnect()
    assert len(got.messages) == BULK


def test_binary_bodies_and_escaped_headers_cross_protocols(mesh):
    a = stomp_router(mesh, "router-a")
    (a_proc,) = mesh.start(a)
    body = b"\x00\x01binary\x00\xff\n\x00"
    # stomp.py escapes header values (not names) as STOMP 1.2 says.
    headers = {"colons": "value:with:colons", "multi": "line\nbreak",
               "back": "slash\\here", "all": "a:b\nc\\d\re"}
    producer, sent = connect(a)
    producer.send("/queue/stomp", body, receipt="1", headers=headers)
    producer.send("/queue/native", body, receipt="2", headers=headers)
    sent.wait_receipt("2")
    producer.subscribe("/queue/stomp", id="s")
    (message,) = sent.wait_messages(1)
    assert message.body == body, message
    assert {name: message.headers.get(name) for name in headers} == headers, message
    consumer = mesh.start_receive(a_proc, "native", 1, TIMEOUT_S)
    assert consumer.wait(TIMEOUT_S) == 0
    (received,) = consumer.messages()
    assert received["encoding"] == "base64"
    assert base64.b64decode(received["body"]) == body
    assert received["headers"] == headers
    producer.disconnect()


def test_a_receipt_is_never_sent_for_a_message_the_router_then_loses(mesh):
    a = stomp_router(mesh, "router-a")
    (a_proc,) = mesh.start(a)
    producer, sent = connect(a)
    total = 3000
    for i in range(total):
        producer.send("/queue/kept", b"%d" % i, receipt=str(i))
    wait_until(lambda: len(sent.receipts) >= 100, TIMEOUT_S, what="some receipts")
    a_proc.sigkill()
    receipted = set(sent.receipts)
    assert 100 <= len(receipted) <= total
    (a_again,) = mesh.start(a)
    consumer = mesh.start_receive(a_again, "kept", None, 15)
    wait_until(lambda: {m["body"] for m in consumer.messages()} >= receipted,
               BULK_TIMEOUT_S, what="every receipted message")
    consumer.kill()


#: A browser's exchange, with autobahn's WebSocket client (asyncio's, in a
#: process of its own: autobahn's Twisted and asyncio flavours do not mix in
#: one process): CONNECT, SUBSCRIBE and a SEND with a receipt; it prints
#: every WebSocket message it receives (base64, one per line) and closes
#: after the MESSAGE.
_WEBSOCKET_CLIENT = textwrap.dedent("""
    import asyncio, base64, sys
    from autobahn.asyncio.websocket import WebSocketClientFactory, WebSocketClientProtocol

    async def exchange(port):
        loop = asyncio.get_running_loop()
        closed = loop.create_future()

        class Browser(WebSocketClientProtocol):
            def onOpen(self):
                self.sendMessage(b"CONNECT\\naccept-version:1.2\\nhost:router-a\\n\\n\\x00")
                self.sendMessage(b"SUBSCRIBE\\nid:0\\ndestination:/queue/ws\\n\\n\\x00"
                                 b"SEND\\ndestination:/queue/ws\\ncontent-type:text/plain\\n"
                                 b"receipt:r\\n\\nhello from a browser\\x00")

            def onMessage(self, payload, is_binary):
                print(base64.b64encode(payload).decode(), flush=True)
                if payload.startswith(b"MESSAGE"):
                    self.sendClose()

            def onClose(self, was_clean, code, reason):
                if not closed.done():
                    closed.set_result(code)

        factory = WebSocketClientFactory(f"ws://127.0.0.1:{port}/stomp",
                                         protocols=["v12.stomp"])
        factory.protocol = Browser
        await loop.create_connection(factory, "127.0.0.1", port)
        await asyncio.wait_for(closed, 60)

    asyncio.run(exchange(int(sys.argv[1])))
""")


def test_a_websocket_client_exchanges_messages(mesh):
    a = stomp_router(mesh, "router-a")
    ws_port = mesh.ports.allocate()
    a.extra["stomp.listener"]["websocket"] = f"tcp:{ws_port}:interface=127.0.0.1"
    a.write()
    mesh.start(a)
    result = subprocess.run([sys.executable, "-c", _WEBSOCKET_CLIENT, str(ws_port)],
                            capture_output=True, text=True, timeout=TIMEOUT_S,
                            env=router_env())
    assert result.returncode == 0, result.stderr
    received = [base64.b64decode(line) for line in result.stdout.split()]
    commands = [payload.split(b"\n", 1)[0] for payload in received]
    assert commands[:1] == [b"CONNECTED"]
    assert b"RECEIPT" in commands and b"MESSAGE" in commands
    (message,) = [p for p in received if p.startswith(b"MESSAGE")]
    assert message.endswith(b"\n\nhello from a browser\x00")
    assert b"content-type:text/plain" in message


#: @stomp/stompjs under node, as a browser application uses it: publish
#: with a receipt, subscribe, print the message it receives as JSON.
_STOMPJS_CLIENT = """
const { Client } = require("@stomp/stompjs");
if (typeof WebSocket === "undefined") {
  global.WebSocket = require("ws");
}
const client = new Client({ brokerURL: process.argv[1], reconnectDelay: 0 });
client.onConnect = () => {
  client.subscribe("/queue/js", (message) => {
    console.log(JSON.stringify({ body: message.body, headers: message.headers }));
    message.ack();
    client.deactivate().then(() => process.exit(0));
  }, { ack: "client-individual" });
  client.publish({ destination: "/queue/js", body: "hello from stompjs",
                   headers: { "content-type": "text/plain", "x-from": "node" } });
};
client.onStompError = (frame) => { console.error(frame.headers.message); process.exit(1); };
client.activate();
"""


def _stompjs_missing() -> str | None:
    """
    Why @stomp/stompjs cannot run here (node, or the module, not found
    through NODE_PATH), or None.
    """
    if shutil.which("node") is None:
        return "node is not installed"
    found = subprocess.run(["node", "-e", "require.resolve('@stomp/stompjs')"],
                           capture_output=True)
    return None if found.returncode == 0 else (
        "@stomp/stompjs is not installed (npm install @stomp/stompjs ws; NODE_PATH=…)")


@pytest.mark.skipif(_stompjs_missing() is not None, reason=str(_stompjs_missing()))
def test_stompjs_exchanges_messages_over_websocket(mesh):
    a = stomp_router(mesh, "router-a")
    ws_port = mesh.ports.allocate()
    a.extra["stomp.listener"]["websocket"] = f"tcp:{ws_port}:interface=127.0.0.1"
    a.write()
    (a_proc,) = mesh.start(a)
    result = subprocess.run(["node", "-e", _STOMPJS_CLIENT, f"ws://127.0.0.1:{ws_port}/stomp"],
                            capture_output=True, text=True, timeout=TIMEOUT_S)
    assert result.returncode == 0, result.stderr
    received = json.loads(result.stdout.splitlines()[-1])
    assert received["body"] == "hello from stompjs"
    assert received["headers"]["content-type"] == "text/plain"
    assert received["headers"]["x-from"] == "node"
    wait_until(lambda: a_proc.queue_depth("js") == 0, TIMEOUT_S, what="js to be empty")


def test_bad_input_closes_only_its_own_connection(mesh):
    a = stomp_router(mesh, "router-a", max_headers=16, max_frame_size=65536)
    (a_proc,) = mesh.start(a)
    good, got = connect(a)
    good.subscribe("/queue/still", id="s")
    native = mesh.start_receive(a_proc, "native-still", 3, TIMEOUT_S)
    bad_inputs = {
        "malformed": b"CONNECT\naccept-version:1.2\n\n\x00FROB\n\n\x00",
        "oversized": (b"CONNECT\naccept-version:1.2\n\n\x00SEND\ndestination:/queue/x\n\n"
                      + b"x" * 70000 + b"\x00"),
        "header flood": (b"CONNECT\naccept-version:1.2\n\n\x00SEND\ndestination:/queue/x\n"
                         + b"".join(b"h%d:v\n" % i for i in range(100)) + b"\n\x00"),
    }
    for name, data in bad_inputs.items():
        with socket.create_connection(("127.0.0.1", a.stomp_port), timeout=TIMEOUT_S) as s:
            s.sendall(data)
            answer = b""
            while chunk := s.recv(65536):
                answer += chunk
        assert b"\nERROR\n" in b"\n" + answer or answer.count(b"ERROR\n") == 1, (name, answer)
        good.send("/queue/still", name.encode(), receipt=name)
        got.wait_receipt(name)
        assert mesh.send(a_proc, "native-still", 1).returncode == 0
    assert [m.body for m in got.wait_messages(3)] == [n.encode() for n in bad_inputs]
    assert native.wait(TIMEOUT_S) == 0 and len(native.messages()) == 3
    good.disconnect()


def test_a_stomp_script_run_as_the_readme_shows_it(mesh, tmp_path):
    a = stomp_router(mesh, "router-a")
    (a_proc,) = mesh.start(a)
    script = tmp_path / "example.py"
    script.write_text(README_EXAMPLE.replace("61613", str(a.stomp_port)))
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            timeout=TIMEOUT_S)
    assert result.returncode == 0, result.stderr
    assert "received: hello from stomp.py" in result.stdout


#: The README's stomp.py example of queues, word for word.
README_EXAMPLE = readme_example("/queue/orders")


def test_users_log_in_over_tls_by_passcode_or_client_certificate(mesh, tmp_path):
    tls = tmp_path / "tls"
    server_ca = make_ca(tls / "server-ca", "meshroute test server CA")
    key, cert = make_server_cert(tls, *server_ca)
    clients_ca = make_ca(tls / "clients-ca", "meshroute test clients CA")
    carol_key, carol_cert = make_client_cert(tls, *clients_ca, "carol")
    a = stomp_router(mesh, "router-a", client_ca=str(tls / "clients-ca" / "ca.pem"))
    a.extra["stomp.listener"]["endpoint"] = (
        f"ssl:{a.stomp_port}:interface=127.0.0.1:privateKey={key}:certKey={cert}")
    users = a.directory / "users"
    write_users(str(users), {"alice": derive("alice-pw")})
    a.extra["security"] = {"users-file": users}
    a.arrays["security.permission"] = [{"users": ["alice"], "send": ["a-*"], "consume": ["a-*"]},
                                       {"users": ["carol"], "send": ["a-in"]}]
    a.write()
    (a_proc,) = mesh.start(a)

    def tls_connection(certificate=None):
        connection = stomp.Connection12([("localhost", a.stomp_port)], auto_decode=False)
        connection.set_ssl([("localhost", a.stomp_port)],
                           ca_certs=str(tls / "server-ca" / "ca.pem"),
                           cert_file=certificate and str(certificate[1]),
                           key_file=certificate and str(certificate[0]))
        collector = Collector()
        connection.set_listener("collector", collector)
        return connection, collector

    wrong, refused = tls_connection()
    wrong.connect("alice", "not-the-password", wait=False)
    wait_until(lambda: refused.errors, TIMEOUT_S, what="the refusal")
    assert refused.errors[0].headers["message"] == "authentication failed"
    alice, got = tls_connection()
    alice.connect("alice", "alice-pw", wait=True)
    alice.send("/queue/a-in", b"from alice", receipt="a")
    got.wait_receipt("a")
    carol, carol_got = tls_connection((carol_key, carol_cert))
    carol.connect(wait=True)
    carol.send("/queue/a-in", b"from carol", receipt="c")
    carol_got.wait_receipt("c")
    assert {s["user"] for s in stomp_sessions(a_proc)} == {"alice", "carol"}
    assert {e["mechanism"] for e in a_proc.events("security.authenticated")} == {
        "passcode", "EXTERNAL"}
    alice.subscribe("/queue/secret", id="s", receipt="no")
    wait_until(lambda: got.errors, TIMEOUT_S, what="alice's refusal")
    assert "may not consume" in got.errors[0].headers["message"]
    assert a_proc.queue_depth("a-in") == 2
    carol.disconnect()


#: A server endpoint on ::1, port 0 (any free port: the admin API says which).
ANY_IPV6_PORT = "tcp6:0:interface=\\:\\:1"


@pytest.mark.skipif(not ipv6_loopback(), reason="this machine cannot listen on ::1 (no IPv6 "
                                                 "loopback): no dual-stack listener to test")
def test_stomp_1_0_1_2_and_native_clients_through_ipv4_and_ipv6_endpoints(mesh):
    """
    The STOMP and client listeners each listen on 127.0.0.1 and ::1; the
    admin API reports every bound port.  stomp.py's own STOMP 1.0
    connection (over IPv4) and a 1.2 one (over IPv6) exchange messages,
    and a native producer over IPv6 reaches the 1.0 consumer, which
    subscribes without an id and acknowledges by message-id.
    """
    spec = mesh.router("router-a", clients=True)
    spec.extra["clients.listener"]["endpoint"] = [
        f"tcp:{spec.client_port}:interface=127.0.0.1", ANY_IPV6_PORT]
    spec.extra["stomp.listener"] = {"endpoint": ["tcp:0:interface=127.0.0.1", ANY_IPV6_PORT]}
    spec.write()
    (proc,) = mesh.start(spec)
    bound = {listener["key"]: listener for listener in proc.info()["listeners"]}
    assert set(bound) == {"routing.listener.endpoint", "admin.endpoint",
                          "clients.listener.endpoint[0]", "clients.listener.endpoint[1]",
                          "stomp.listener.endpoint[0]", "stomp.listener.endpoint[1]"}
    assert bound["clients.listener.endpoint[0]"]["address"] == f"127.0.0.1:{spec.client_port}"
    stomp4, stomp6 = bound["stomp.listener.endpoint[0]"], bound["stomp.listener.endpoint[1]"]
    native6 = bound["clients.listener.endpoint[1]"]
    assert stomp4["address"] == f"127.0.0.1:{stomp4['port']}" and stomp4["port"] > 0
    assert stomp6["address"] == f"[::1]:{stomp6['port']}" and stomp6["port"] > 0
    assert stomp6["endpoint"] == ANY_IPV6_PORT
    assert native6["address"] == f"[::1]:{native6['port']}"

    old = stomp.Connection10([("127.0.0.1", stomp4["port"])], auto_decode=False)
    old_got = Collector()
    old.set_listener("collector", old_got)
    old.connect(wait=True, headers={"client-id": "legacy"})
    assert old_got.connected[0].headers["version"] == "1.0"
    assert "heart-beat" not in old_got.connected[0].headers
    # 1.0 has no escapes: the backslashes are the value's.
    old.send("/queue/legacy", b"from 1.0", headers={"path": "C:\\new\\table", "receipt": "r1"})
    old_got.wait_receipt("r1")

    new, new_got = (stomp.Connection12([("::1", stomp6["port"])], auto_decode=False),
                    Collector())
    new.set_listener("collector", new_got)
    new.connect(wait=True)
    new.subscribe("/queue/legacy", id="s", ack="auto")
    (message,) = new_got.wait_messages(1)
    assert message.body == b"from 1.0" and message.headers["path"] == "C:\\new\\table"

    sent = run_cli("send", "--connect", f"tcp:\\:\\:1:{native6['port']}",
                   "--to", "native", "--count", "3", timeout=TIMEOUT_S)
    assert sent.returncode == 0, sent.stderr
    old.subscribe("/queue/native", ack="client")
    messages = old_got.wait_messages(3)
    assert {m.headers["subscription"] for m in messages} == {"/queue/native"}
    old.ack(messages[-1].headers["message-id"], receipt="acked")
    old_got.wait_receipt("acked")
    wait_until(lambda: proc.queue_depth("native") == 0 and proc.queue_depth("legacy") == 0,
               TIMEOUT_S, what="both queues to be empty")
    assert old_got.errors == [] and new_got.errors == []
    protocols = {s["client_id"]: s["protocol"] for s in stomp_sessions(proc)}
    assert protocols == {"legacy": "stomp", "": "stomp"}
    old.disconnect()
    new.disconnect()
