"""
The topology page's drawing (meshroute/admin/static/) in headless
Chromium, fed JSON written by the test: a plain HTTP server serves the
page's files and, at the admin API's paths, files the test writes, so it
knows exactly what the page was told and can change it between polls.
"""

import http.server
import json
import shutil
import threading
from functools import partial
from importlib.resources import files

import pytest

from meshroute.admin.page import ASSETS

STATIC = files("meshroute.admin") / "static"


class Admin:
    """
    A fake admin endpoint: the page's files, and what the API answers.
    """

    def __init__(self, root) -> None:
        self.root = root
        (root / "static").mkdir(parents=True)
        shutil.copyfile(STATIC / "index.html", root / "index.html")
        for name in ASSETS:
            shutil.copyfile(STATIC / name, root / "static" / name)
        (root / "api" / "v1").mkdir(parents=True)
        handler = partial(_Quiet, directory=str(root))
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/?interval=0.2"

    def answer(self, path: str, value) -> None:
        """
        What C{GET /api/v1/PATH} answers from now on.
        """
        target = self.root / "api" / "v1" / path
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_suffix(".tmp")
        temporary.write_text(json.dumps(value))
        temporary.replace(target)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def admin(tmp_path):
    endpoint = Admin(tmp_path / "site")
    yield endpoint
    endpoint.close()


def link(peer: str, in_flight: int, sent: int, received: int) -> dict:
    return {"link": f"router-a/{peer}", "peer": peer, "direction": "connector",
            "stage": "delivery", "in_flight": in_flight, "sent": sent, "received": received}


def topology(in_flight: int) -> dict:
    return {
        "router": "router-a", "changed_at": 1795458725.0, "window": 1024,
        "nodes": [{"name": "router-a", "reachable": True, "hops": 0, "next_hop": None},
                  {"name": "router-b", "reachable": True, "hops": 1, "next_hop": "router-b"}],
        "edges": [{"a": "router-a", "b": "router-b", "stage": "delivery",
                   "link": link("router-b", in_flight, 0, 0), "last_close": None}],
    }


def serve_router_a(admin, in_flight: int, sent: int) -> None:
    admin.answer("topology", topology(in_flight))
    admin.answer("router", {"name": "router-a", "ha": {"role": "primary",
                                                       "state": "active-replicated"}})
    admin.answer("queues", [{"name": "orders", "depth": 7, "consumers": 0},
                            {"name": "audit", "depth": 5, "consumers": 1}])
    admin.answer("links", [link("router-b", in_flight, sent, 0)])


def polled(page) -> str:
    return page.evaluate("document.body.dataset.updated || ''")


def test_a_full_window_tints_the_link_and_rates_come_from_the_counters(admin, browser,
                                                                        artifacts):
    serve_router_a(admin, in_flight=0, sent=0)
    page = browser.open(admin.url)
    page.wait_for("document.querySelectorAll('.edge').length === 1", what="the link drawn")
    assert page.evaluate("document.querySelector('.edge line').getAttribute('stroke')") == (
        "#1f9d55")

    serve_router_a(admin, in_flight=1024, sent=5000)
    page.wait_for("document.querySelector('.edge').dataset.window === '1.000'",
                  what="the full window drawn")

    # Fully tinted: the legend's colour for a full window.
    assert page.evaluate("document.querySelector('.edge line').getAttribute('stroke')") == (
        "#e08a00")
    label = page.evaluate("document.querySelector('.edge text').textContent")
    assert label.startswith("router-a→ ") and label.endswith("router-b→ 0/s · window 100%")
    assert int(label.split("→ ")[1].split("/s")[0]) > 0, label
    # The badges: this router's queued messages and HA role; the other
    # router's, which this fake endpoint cannot ask for, say so.
    badges = page.evaluate("""Object.fromEntries([...document.querySelectorAll('.node')].map(
        node => [node.dataset.router, [node.querySelector('.badge').textContent,
                                       node.querySelector('.role').textContent]]))""")
    assert badges == {"router-a": ["queued 12", "primary · active-replicated"],
                      "router-b": ["no data", "1 hop"]}
    page.screenshot(artifacts / "topology-window-full.png")
    assert page.errors == []


def test_a_half_full_window_is_half_tinted(admin, browser):
    serve_router_a(admin, in_flight=512, sent=0)
    page = browser.open(admin.url)

    page.wait_for("document.querySelector('.edge') && "
                  "document.querySelector('.edge').dataset.window === '0.500'",
                  what="the half-full window drawn")
    # Half-way from the delivery colour to the full window's, per channel.
    assert page.evaluate("document.querySelector('.edge line').getAttribute('stroke')") == (
        "#80942b")


def test_when_the_api_stops_answering_the_header_says_so(admin, browser):
    serve_router_a(admin, in_flight=0, sent=0)
    page = browser.open(admin.url)
    page.wait_for("document.querySelectorAll('.node').length === 2", what="the routers drawn")

    (admin.root / "api" / "v1" / "topology").unlink()

    page.wait_for("document.getElementById('updated').classList.contains('failing')",
                  what="the failure shown")
    assert page.evaluate("document.getElementById('updated').textContent").startswith(
        "the admin API answers 404")
    # What was drawn stays.
    assert page.evaluate("document.querySelectorAll('.node').length") == 2


def test_each_routers_topic_interest_is_written_under_it(admin, browser, artifacts):
    serve_router_a(admin, in_flight=0, sent=0)
    page = browser.open(admin.url)
    page.wait_for("document.querySelectorAll('.node').length === 2", what="the routers drawn")
    assert page.evaluate("document.querySelectorAll('.node .interest').length") == 0

    admin.answer("topics", {
        "router": "router-a",
        "subscriptions": [{"queue": "$subscriber:1", "pattern": "orders.*", "durable": False,
                           "client_id": None, "name": None, "shared": False, "consumers": 1,
                           "depth": 0, "unacknowledged": 0}],
        "advertised": {"version": 5, "patterns": ["orders.*"]},
        "interest": [{"router": "router-b", "version": 9, "reachable": True,
                      "patterns": ["prices.#", "rates.*.gbp", "rates.*.usd"]}],
        "fan_out": {"waiting": 0, "publications": {"client": 0, "link": 0},
                    "copies": {"durable": 0, "non-durable": 0, "link": 0}}})
    page.wait_for("document.querySelectorAll('.node .interest').length === 2",
                  what="the interest written")

    interest = page.evaluate("""Object.fromEntries([...document.querySelectorAll('.node')].map(
        node => [node.dataset.router, [node.querySelector('.interest').textContent,
                                       node.querySelector('title').textContent]]))""")
    assert interest["router-a"] == ["topics: orders.*", "router-a\ntopic interest: orders.*"]
    # router-b's other views cannot be asked of this fake endpoint: its
    # interest is router-a's to tell.
    shown, tooltip = interest["router-b"]
    assert shown == "topics: prices.#, rates.*.gbp +1"
    assert tooltip.endswith("\ntopic interest: prices.#, rates.*.gbp, rates.*.usd")
    # The topics tab: the subscriptions of the router clicked.
    page.evaluate("document.querySelector('#tabs button[data-view=topics]').click()")
    page.wait_for("document.querySelector('#details-table tbody td') && "
                  "document.querySelector('#details-table tbody td').textContent === "
                  "'$subscriber:1'", what="the subscriptions listed")
    page.screenshot(artifacts / "topology-topics.png")
    assert page.errors == []
