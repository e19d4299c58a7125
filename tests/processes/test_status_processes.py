"""
C{meshroute status} views against real routers: each view as a table and
as JSON, another router asked through the mesh two hops away, every
router at once, and a router that cannot be reached.

Three routers in a line, A–B–C: C is reachable from A only through B.
"""

import json

import pytest

from support.routers import PORTS, mesh, run_cli  # noqa: F401 (mesh is a fixture)


@pytest.fixture
def line(mesh):
    """
    A–B–C running, A with a route to C through B; C has a client
    listener and a queue with messages.
    """
    c = mesh.router("router-c", clients=True)
    b = mesh.router("router-b", connect=[c])
    a = mesh.router("router-a", connect=[b])
    a_proc, b_proc, c_proc = mesh.start(a, b, c)
    a_proc.wait_route("router-c", next_hop="router-b")
    c_proc.wait_route("router-a", next_hop="router-b")
    assert mesh.send(c_proc, "orders", 3).returncode == 0
    return a, b, c, a_proc, b_proc, c_proc


def status(*args: str):
    result = run_cli("status", *args)
    return result


def table_rows(stdout: str, first: str) -> list[list[str]]:
    return [line.split() for line in stdout.splitlines() if line.split()[:1] == [first]]


def test_status_router_through_two_hops_answers_with_its_data(line):
    a, b, c, *_ = line
    queues = status("--admin", a.admin_url, "queues", "--router", "router-c", "--json")
    assert queues.returncode == 0, queues.stderr
    [orders] = json.loads(queues.stdout)
    assert (orders["name"], orders["depth"], orders["consumers"]) == ("orders", 3, 0)
    own = json.loads(status("--admin", c.admin_url, "queues", "--json").stdout)
    assert [q["name"] for q in own] == ["orders"] and own[0]["depth"] == 3

    links = status("--admin", a.admin_url, "links", "--router", "router-c")
    assert links.returncode == 0, links.stderr
    [row] = table_rows(links.stdout, "router-b")
    assert row[1:3] == ["listener", "delivery"]  # B connects to C

    default = status("--admin", a.admin_url, "--router", "router-c")
    assert default.returncode == 0, default.stderr
    assert default.stdout.startswith("router router-c ")


def test_clients_cannot_use_the_system_queues(line, mesh):
    *_, c_proc = line
    for address in ("$admin@router-c", "$admin-reply", "$admin@router-a"):
        sent = mesh.send(c_proc, address, 1)
        assert sent.returncode != 0 and "bad-address" in sent.stderr, sent.stderr
    for queue in ("$admin", "$admin-reply"):
        receiver = mesh.start_receive(c_proc, queue, count=1, timeout=10)
        assert receiver.wait() != 0 and "bad-address" in receiver.stderr, receiver.stderr
    # Nor does anything of them show as a queue, after questions crossed the mesh.
    a, _, c = line[:3]
    assert status("--admin", a.admin_url, "sessions", "--router", "router-c").returncode == 0
    names = [q["name"] for q in json.loads(status("--admin", c.admin_url, "queues",
                                                  "--json").stdout)]
    assert names == ["orders"]


def test_each_view_as_a_table_and_as_json(line, mesh):
    a, b, c, a_proc, b_proc, c_proc = line
    consumer = mesh.start_receive(c_proc, "orders", count=1, timeout=30)
    assert consumer.wait() == 0

    links = status("--admin", b.admin_url, "links")
    assert links.returncode == 0, links.stderr
    header = links.stdout.splitlines()[0].split()
    assert header[:4] == ["peer", "direction", "stage", "since"]
    assert {row[0] for row in table_rows(links.stdout, "router-a")
            + table_rows(links.stdout, "router-c")} == {"router-a", "router-c"}
    [link] = [l for l in json.loads(status("--admin", b.admin_url, "links", "--json").stdout)
              if l["peer"] == "router-c"]
    assert link["stage"] == "delivery" and link["sent"] >= 0 and link["in_flight"] == 0

    routers = status("--admin", a.admin_url, "routers")
    assert routers.returncode == 0, routers.stderr
    assert routers.stdout.startswith("last topology change: ")
    assert table_rows(routers.stdout, "router-c")[0][1:4] == ["yes", "router-b", "2"]
    described = json.loads(status("--admin", a.admin_url, "routers", "--json").stdout)
    assert [r["name"] for r in described] == ["router-a", "router-b", "router-c"]

    queues = status("--admin", c.admin_url, "queues")
    assert queues.returncode == 0, queues.stderr
    [orders] = table_rows(queues.stdout, "orders")
    assert orders[1] == "2"  # depth: one of three consumed

    sessions = status("--admin", c.admin_url, "sessions", "--json")
    assert sessions.returncode == 0 and json.loads(sessions.stdout) == []
    assert "no sessions" in status("--admin", c.admin_url, "sessions").stdout

    # The configuration file finds the admin API as well as --admin does.
    by_config = status(str(c.config_path), "queues", "--json")
    assert by_config.returncode == 0, by_config.stderr
    assert json.loads(by_config.stdout)[0]["name"] == "orders"


def test_all_routers_in_one_table(line):
    a, *_ = line
    gathered = status("--admin", a.admin_url, "links", "--all-routers")
    assert gathered.returncode == 0, gathered.stderr
    lines = gathered.stdout.splitlines()
    assert lines[0].split()[:3] == ["router", "peer", "direction"]
    pairs = {tuple(line.split()[:2]) for line in lines[1:]}
    assert pairs == {("router-a", "router-b"), ("router-b", "router-a"),
                     ("router-b", "router-c"), ("router-c", "router-b")}
    # Columns align: every row's peer starts where the header's does.
    column = lines[0].index("peer")
    assert all(line[column - 2:column] == "  " and line[column] != " " for line in lines[1:])

    as_json = json.loads(status("--admin", a.admin_url, "queues", "--all-routers",
                                "--json").stdout)
    assert set(as_json) == {"router-a", "router-b", "router-c"}
    assert [q["name"] for q in as_json["router-c"]] == ["orders"]

    # The topics of every router, two of them asked through the mesh.
    topics = status("--admin", a.admin_url, "topics", "--all-routers")
    assert topics.returncode == 0, topics.stderr
    lines = topics.stdout.splitlines()
    assert lines[:3] == ["subscriptions:", "  no topic subscriptions", "advertised interest:"]
    assert lines[3].split() == ["router", "version", "patterns", "held", "by", "waiting",
                                "published"]
    # Each advertises that it wants nothing, and the others hold that.
    rows = [line.split() for line in lines[4:]]
    assert [row[:1] + row[2:] for row in rows] == [
        [router, "-", "2/2", "0", "0"] for router in ("router-a", "router-b", "router-c")]
    assert all(int(row[1]) > 0 for row in rows)


def test_an_unreachable_router_is_a_clear_failure(line):
    a, b, c, a_proc, b_proc, c_proc = line
    c_proc.sigstop()
    try:
        frozen = status("--admin", a.admin_url, "queues", "--router", "router-c")
        assert frozen.returncode == 1
        assert "cannot read router-c through" in frozen.stderr
        assert "unreachable" in frozen.stderr
        gathered = status("--admin", a.admin_url, "queues", "--all-routers")
        assert gathered.returncode == 0, gathered.stderr
        assert "router-c: unreachable" in gathered.stdout
    finally:
        c_proc.sigcont()
    unknown = status("--admin", a.admin_url, "links", "--router", "router-z")
    assert unknown.returncode == 1 and "no router named 'router-z'" in unknown.stderr
    nobody = status("--admin", f"http://127.0.0.1:{PORTS.allocate()}", "links")
    assert nobody.returncode == 1 and "cannot read" in nobody.stderr


def test_usage_errors():
    assert status("links").returncode == 2  # neither --admin nor a configuration
    both = status("--admin", "http://127.0.0.1:1", "links", "--router", "x", "--all-routers")
    assert both.returncode == 2 and "exclude each other" in both.stderr
    assert status("--admin", "http://127.0.0.1:1", "nonsense").returncode == 2
