"""
Message expiry with real C{twistd -n meshroute} routers on 127.0.0.1: a
time to live given to C{meshroute send --message-ttl} crosses two links
with its message and survives a restart of the router that holds it, and
the message is then never delivered but set aside in C{$expired}.

Synchronisation is a poll of the event logs and the admin API with
generous deadlines, never a sleep.  The one duration that matters is the
time to live, which must outlast the restart: it is far longer than a
start takes even on a loaded machine, and the test checks that the
messages expired in the restarted process, not before.
"""

from support.routers import mesh  # noqa: F401 (a fixture)

#: Long enough for the messages to cross the line and for router-c to
#: be restarted before they expire.
TTL_S = 20


def test_an_expiry_crosses_links_and_survives_a_restart(mesh):  # noqa: F811
    options = {"clients": True, "keepalive_interval": 1000}
    c = mesh.router("router-c", **options)
    b = mesh.router("router-b", connect=[c], **options)
    a = mesh.router("router-a", connect=[b], **options)
    a_proc, _b_proc, c_proc = mesh.start(a, b, c)
    a_proc.wait_route("router-c", next_hop="router-b")

    expiring = mesh.send(a_proc, "q@router-c", 3, "--body", "expiring", "--message-ttl",
                         str(TTL_S))
    assert expiring.returncode == 0, expiring.stderr
    lasting = mesh.send(a_proc, "q@router-c", 2, "--body", "lasting")
    assert lasting.returncode == 0, lasting.stderr
    c_proc.wait_event("message.enqueued", timeout=60, count=5)
    # The first three accepted are the expiring ones (one producer, in order).
    expiring_ids = {e["msg_id"] for e in a_proc.events("message.accepted")[:3]}
    assert c_proc.events("message.expired") == []

    assert c_proc.terminate() == 0
    [c_proc] = mesh.start(c)
    restarted = c_proc.events("router.started")[-1]["time"]
    expired = c_proc.wait_event("message.expired", timeout=TTL_S + 60, count=3)
    assert {e["msg_id"] for e in expired} == expiring_ids
    assert {(e["where"], e["dest"], e["origin"]) for e in expired} == {
        ("queue", "q@router-c", "router-a")}
    assert all(e["time"] > restarted for e in expired)
    assert c_proc.queue_depth("$expired") == 3

    consumer = mesh.start_receive(c_proc, "q", 2, 60)
    code = consumer.wait(90)
    assert code == 0, consumer.stderr
    assert [m["body"] for m in consumer.messages()] == ["lasting", "lasting"]
    aside = mesh.start_receive(c_proc, "$expired", 3, 60)
    assert aside.wait(90) == 0, aside.stderr
    assert {m["id"] for m in aside.messages()} == expiring_ids
    assert {m["headers"]["x-original-address"] for m in aside.messages()} == {"q@router-c"}
