"""
Tests for C{GET /api/v1/ha} and for the admin API of an HA instance,
which serves whether or not its router is (L{meshroute.admin.api}).
"""

import io

from meshroute import __version__, cli
from meshroute.cli import status_command
from meshroute.admin.api import admin_site
from meshroute.harules.quorum import LogPosition
from meshroute.ha.status import HAStatus, PeerStatus, VoterStatus

from support.admin_requests import FakeRouter, serve

STATUS = HAStatus(
    instance="router-b/backup",
    role="backup",
    state="backup-in-sync",
    epoch=7,
    served_epoch=6,
    position=LogPosition(7, 1234),
    lag=3,
    peer=PeerStatus(endpoint="tcp:127.0.0.1:7102", connected=True),
    voters=(VoterStatus("router-b/primary", "tcp:127.0.0.1:7102", True),
            VoterStatus("router-a", "tcp:127.0.0.1:7001", False)),
)

DESCRIBED = {
    "instance": "router-b/backup",
    "policy": "replication",
    "role": "backup",
    "state": "backup-in-sync",
    "epoch": 7,
    "served_epoch": 6,
    "position": {"epoch": 7, "position": 1234},
    "lag": 3,
    "peer": {"endpoint": "tcp:127.0.0.1:7102", "connected": True, "refusal": None},
    "voters": [
        {"name": "router-b/primary", "endpoint": "tcp:127.0.0.1:7102", "connected": True},
        {"name": "router-a", "endpoint": "tcp:127.0.0.1:7001", "connected": False},
    ],
}


class FakeInstance:
    """
    An HA instance as the admin API sees it: its status, and its router
    while it is the active one.
    """

    name = "router-b"

    def __init__(self, router=None, status=STATUS):
        self.router = router
        self.status = status

    def ha_status(self):
        return self.status

    def uptime_s(self):
        return 12.5


def test_the_status_is_the_issues_json():
    assert serve(admin_site(ha=FakeInstance()), "/api/v1/ha") == (
        200, [b"application/json"], DESCRIBED)


def test_an_active_instance_reports_its_router_and_its_ha_state():
    site = admin_site(ha=FakeInstance(router=FakeRouter()))
    status, _, body = serve(site, "/api/v1/router")
    assert status == 200
    assert body == {"name": "router-a", "version": "0", "uptime_s": 1.0, "ha": DESCRIBED}
    assert serve(site, "/api/v1/queues")[2] == [{"name": "orders", "depth": 2, "consumers": 0}]


def test_an_instance_that_is_not_active_says_it_is_not_serving():
    status, _, body = serve(admin_site(ha=FakeInstance()), "/api/v1/router")
    assert status == 200
    assert body == {"name": "router-b", "version": __version__, "uptime_s": 12.5,
                    "backlog": {}, "serving": False, "ha": DESCRIBED}


def test_the_router_s_resources_are_unavailable_while_not_active():
    site = admin_site(ha=FakeInstance())
    for path in ("/api/v1/links", "/api/v1/routes", "/api/v1/queues", "/api/v1/sessions"):
        status, content_type, body = serve(site, path)
        assert (status, content_type) == (503, [b"application/json"])
        assert body["error"] == "not-active"
        assert "backup-in-sync" in body["detail"]


def test_the_router_is_looked_up_at_each_request():
    instance = FakeInstance()
    site = admin_site(ha=instance)
    assert serve(site, "/api/v1/queues")[0] == 503
    instance.router = FakeRouter()
    assert serve(site, "/api/v1/queues")[0] == 200
    instance.router = None
    assert serve(site, "/api/v1/router")[2]["serving"] is False


def test_a_router_without_ha_has_no_ha_resource():
    status, content_type, body = serve(admin_site(FakeRouter()), "/api/v1/ha")
    assert (status, content_type) == (404, [b"application/json"])
    assert body["error"] == "not-found"
    assert "[ha]" in body["detail"]


def test_a_router_without_ha_reports_no_ha_state():
    assert "ha" not in serve(admin_site(FakeRouter()), "/api/v1/router")[2]


def test_an_active_status_without_a_peer_or_lag():
    alone = HAStatus("router-b/primary", "primary", "active-alone", 8, 8, LogPosition(8, 0), None,
                     PeerStatus("tcp:127.0.0.1:7202", False), ())
    body = serve(admin_site(ha=FakeInstance(status=alone)), "/api/v1/ha")[2]
    assert (body["lag"], body["peer"], body["voters"]) == (
        None, {"endpoint": "tcp:127.0.0.1:7202", "connected": False, "refusal": None}, [])


def test_meshroute_status_of_an_instance_that_is_not_active(monkeypatch):
    """
    C{meshroute status} shows the HA state, and asks for no links from an
    instance that has none to show.
    """
    site = admin_site(ha=FakeInstance())
    asked = []

    def fetch_json(base, path, token=None, cafile=None):
        asked.append(path)
        status, _, body = serve(site, path)
        assert status == 200
        return body

    monkeypatch.setattr(status_command, "fetch_json", fetch_json)
    out = io.StringIO()
    assert cli.main(["status", "--admin", "http://127.0.0.1:8002"], out=out) == 0
    assert asked == ["/api/v1/router"]
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("router router-b (meshroute ")
    assert lines[1:] == [
        "  ha: backup, backup-in-sync, epoch 7, position 7/1234, lag 3, peer connected; "
        "not serving",
    ]


def test_meshroute_status_says_why_a_pair_is_refused():
    refusal = ("group-mismatch: this instance of router router-b is in HA group 'router-b', "
               "the other instance in 'router-b-typo'")
    router = {"name": "router-b", "version": "1", "uptime_s": 3.0, "serving": False,
              "ha": DESCRIBED | {"state": "starting", "peer": DESCRIBED["peer"] | {
                  "connected": False, "refusal": refusal}}}
    assert status_command.format_links(router, []).splitlines()[1:] == [
        "  ha: backup, starting, epoch 7, position 7/1234, lag 3, peer not connected; "
        "not serving",
        f"  ha: the pair is refused: {refusal}",
    ]


def test_meshroute_status_of_the_active_instance():
    router = {"name": "router-b", "version": "1", "uptime_s": 3.0, "serving": True,
              "ha": DESCRIBED | {"state": "active-replicated", "lag": None}}
    assert status_command.format_links(router, []).splitlines()[1:] == [
        "  ha: backup, active-replicated, epoch 7, position 7/1234, lag -, peer connected",
        "  no links",
    ]
