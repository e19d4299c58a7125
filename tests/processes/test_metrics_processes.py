"""
C{GET /metrics} of real router processes: the exposition parses with
prometheus-client's parser, its counters follow a known traffic pattern
exactly, a link closed by a frozen peer is counted once, the token guards
it as it guards the API, and C{promtool check metrics} accepts it where
promtool is installed.
"""

import json
import shutil
import subprocess
import urllib.error
import urllib.request
from collections import Counter

import pytest
from prometheus_client.parser import text_string_to_metric_families

from support.routers import mesh, wait_until, write_token_file  # noqa: F401 (mesh is a fixture)

N = 500
TOKEN = "metrics-token-0123456789abcdef"


def fetch(spec, path: str = "/metrics", *, method: str = "GET", token: str | None = None):
    """
    C{(status, content type, body)} of one request to C{spec}'s admin
    endpoint, refusals included.
    """
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    request = urllib.request.Request(spec.admin_url + path, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers["content-type"], response.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["content-type"], e.read()


def scrape(process) -> dict:
    """
    C{(sample name, labels)} → value, for every sample of one scrape.
    """
    status, content_type, body = fetch(process.spec, token=process.spec.admin_token)
    assert status == 200, body
    assert content_type.startswith("text/plain; version=0.0.4")
    samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            assert key not in samples, f"{key} appears twice"
            samples[key] = sample.value
    return samples


def value(samples: dict, name: str, **labels) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def test_counters_follow_the_traffic_and_a_closed_links_reason_counts_once(mesh):
    """
    N messages from A to a consumer on B: A accepted and forwarded N and
    its link sent N, B's link received N and B enqueued and consumed N.
    Then B is frozen: A's link closes for keepalive, counted once, and
    every reason A counts is what its event log says.
    """
    b = mesh.router("router-b", clients=True)
    a = mesh.router("router-a", connect=[b], clients=True)
    a_proc, b_proc = mesh.start(a, b)
    a_proc.wait_route("router-b")
    consumer = mesh.start_receive(b_proc, "orders", count=N, timeout=60)
    assert mesh.send(a_proc, "orders@router-b", N).returncode == 0
    assert consumer.wait(120) == 0 and consumer.count() == N

    def settled():
        at_a, at_b = scrape(a_proc), scrape(b_proc)
        if (value(at_a, "meshroute_messages_forwarded_total") == N
                and value(at_b, "meshroute_messages_consumed_total") == N):
            return at_a, at_b
        return None

    at_a, at_b = wait_until(settled, 30, what="A to count N forwarded and B N consumed")
    assert [value(at_a, f"meshroute_messages_{name}_total")
            for name in ("accepted", "forwarded", "enqueued", "consumed")] == [N, N, 0, 0]
    assert [value(at_b, f"meshroute_messages_{name}_total")
            for name in ("accepted", "forwarded", "enqueued", "consumed")] == [0, 0, N, N]
    to_b = {"peer": "router-b", "direction": "connector"}
    to_a = {"peer": "router-a", "direction": "listener"}
    assert value(at_a, "meshroute_link_sent_messages_total", **to_b) == N
    assert value(at_b, "meshroute_link_received_messages_total", **to_a) == N
    assert value(at_a, "meshroute_link_in_flight_messages", **to_b) == 0
    assert value(at_a, "meshroute_link_stage", **to_b, stage="delivery") == 1
    assert value(at_b, "meshroute_queue_messages", queue="orders") is None
    assert value(at_a, "meshroute_store_commit_seconds_count") > 0
    assert value(at_a, "process_resident_memory_bytes") > 0
    assert value(at_a, "meshroute_router_info", router="router-a",
                 version=a_proc.info()["version"]) == 1

    b_proc.sigstop()
    a_proc.wait_event("link.closed", reason="keepalive", peer="router-b", timeout=30)
    b_proc.sigcont()
    a_proc.wait_delivery("router-b", timeout=30)

    def closes_as_logged():
        closes = {labels: v for (name, labels), v in scrape(a_proc).items()
                  if name == "meshroute_link_closes_total"}
        logged = Counter(e["reason"] for e in a_proc.events("link.closed"))
        if closes == {frozenset({("reason", reason)}): count
                      for reason, count in logged.items()}:
            return closes
        return None

    closes = wait_until(closes_as_logged, 10, what="A's link closes to be its event log's")
    assert closes[frozenset({("reason", "keepalive")})] == 1


def test_the_token_guards_metrics(mesh):
    """
    With a token configured, a scrape without it (or with a wrong one) is
    refused as any API request is; with it, the exposition is served, to
    GET only.
    """
    spec = mesh.router("router-a")
    spec.admin = {"token-file": write_token_file(spec.directory, TOKEN)}
    spec.admin_token = TOKEN
    spec.write()
    [process] = mesh.start(spec)
    for token in (None, "wrong-token-0123456789abcdef"):
        status, content_type, body = fetch(spec, token=token)
        assert (status, json.loads(body)["error"]) == (401, "unauthorized")
    status, content_type, body = fetch(spec, method="POST", token=TOKEN)
    assert (status, json.loads(body)["error"]) == (405, "method-not-allowed")
    status, content_type, body = fetch(spec, "/metrics/more", token=TOKEN)
    assert (status, json.loads(body)["error"]) == (404, "not-found")
    assert value(scrape(process), "meshroute_messages_accepted_total") == 0


@pytest.mark.skipif(shutil.which("promtool") is None,
                    reason="promtool is not installed (Debian: apt-get install prometheus)")
def test_promtool_accepts_a_scrape(mesh):
    """
    C{promtool check metrics} finds nothing to say about a scrape of a
    router that links, queues and has messages waiting.
    """
    b = mesh.router("router-b", clients=True)
    a = mesh.router("router-a", connect=[b], clients=True)
    a_proc, b_proc = mesh.start(a, b)
    a_proc.wait_route("router-b")
    assert mesh.send(a_proc, "orders@router-b", 10).returncode == 0
    b_proc.wait_event("message.enqueued", count=10)
    for process in (a_proc, b_proc):
        status, _, body = fetch(process.spec)
        assert status == 200
        check = subprocess.run(["promtool", "check", "metrics"], input=body,
                               capture_output=True, timeout=60)
        assert (check.returncode, check.stdout + check.stderr) == (0, b""), body.decode()
