"""
Endpoint lists with real processes (issue 9, "Endpoint lists"): a routing
connector whose C{endpoint} is a list, and C{meshroute receive} given
C{--connect} twice, each against real C{twistd -n meshroute} routers on
127.0.0.1.  What happened is read as an operator would: the admin API,
the event log, the client's output.
"""

from support.routers import PORTS, mesh, wait_until  # noqa: F401 (mesh is a fixture)

#: Client reconnection options: retry quickly, forever.
RECONNECT = ["--reconnect-attempts", "-1", "--retry-interval", "100",
             "--max-retry-interval", "200"]


def test_connector_skips_a_closed_first_endpoint(mesh):
    """
    router-a's connector lists a closed port first, then router-b: the
    link comes up through the second endpoint, and the admin API and the
    event log say which one it used.
    """
    b = mesh.router("router-b")
    a = mesh.router("router-a", connect=[b])
    closed = f"tcp:127.0.0.1:{PORTS.allocate()}"
    a.connectors[0]["endpoint"] = [closed, b.routing_endpoint]
    a.write()
    a_proc, b_proc = mesh.start(a, b)
    link = a_proc.wait_delivery("router-b")["router-b"]
    assert link["endpoint"] == b.routing_endpoint
    connects = a_proc.events("link.stage", stage="connect", direction="connector")
    assert connects and connects[-1]["endpoint"] == b.routing_endpoint


def test_client_moves_to_the_second_router(mesh):
    """
    C{meshroute receive --connect A --connect B}: it opens its session at
    A; A is stopped; the client recreates its session at B (FAILOVER, on
    stderr with B's endpoint), keeps consuming there, and exits 0.
    """
    a = mesh.router("router-a", clients=True)
    b = mesh.router("router-b", clients=True)
    a_proc, b_proc = mesh.start(a, b)
    consumer = mesh._client("receive", [
        "receive", "--connect", a.client_endpoint, "--connect", b.client_endpoint,
        "--queue", "q", "--json", "--count", "2", "--timeout", "60", *RECONNECT])
    a_proc.wait_event("session.opened", count=1)
    assert mesh.send(a_proc, "q", 1, "--body", "from a").returncode == 0
    wait_until(lambda: consumer.count() == 1, 30, what="the message from router-a")
    a_proc.terminate()
    b_proc.wait_event("session.opened", count=1, timeout=30)
    assert mesh.send(b_proc, "q", 1, "--body", "from b").returncode == 0
    assert consumer.wait(timeout=60) == 0, consumer.stderr
    assert [m["body"] for m in consumer.messages()] == ["from a", "from b"]
    assert (f"session recreated at {b.client_endpoint} (FAILOVER)" in consumer.stderr), \
        consumer.stderr
