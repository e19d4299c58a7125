"""
A real router process as an HA witness: a scripted candidate speaks the
vote frames to its routing listener over TCP; the grant it answers
survives SIGKILL (the store synced it before the answer was sent).
"""

import socket

from meshroute.harules.quorum import STALE_EPOCH
from support.routers import mesh  # noqa: F401 (mesh is a fixture)
from support.vote_candidate import VoteCandidate

GROUP = "router-b"
PRIMARY = "router-b/primary"
BACKUP = "router-b/backup"


class _SocketTransport:
    """
    The one transport method L{VoteCandidate} writes through.
    """

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def write(self, data: bytes) -> None:
        self._sock.sendall(data)


def ask(spec, secret: bytes, candidate: str, epoch: int):
    """
    Dial C{spec}'s routing listener as an instance of router-b, ask for
    C{epoch} for C{candidate}, and return the answer.
    """
    with socket.create_connection(("127.0.0.1", spec.routing_port), timeout=10) as sock:
        voter = VoteCandidate("router-b", spec.name, secret)
        voter.transport = _SocketTransport(sock)
        voter.connectionMade()
        asked = False
        while not voter.answers:
            if voter.authenticated and not asked:
                voter.ask(GROUP, candidate, epoch)
                asked = True
            data = sock.recv(65536)
            assert data, f"{spec.name} closed the vote connection (rejected: {voter.rejected})"
            voter.dataReceived(data)
        return voter.answers[0]


def test_a_grant_is_durable_across_sigkill(mesh):  # noqa: F811
    secret = mesh.password_file.read_bytes().rstrip(b"\r\n")
    a = mesh.router("router-a")
    b = mesh.router("router-b", listener=False, connect=[a])
    a_proc, b_proc = mesh.start(a, b)
    [link] = a_proc.wait_delivery("router-b").values()

    assert ask(a, secret, BACKUP, 1).granted
    refused = ask(a, secret, PRIMARY, 1)
    assert (refused.granted, refused.reason, refused.granted_epoch) == (False, STALE_EPOCH, 1)
    # The vote connections of router-b left its routing link alone.
    assert a_proc.delivery_links()["router-b"]["link"] == link["link"]
    # (Wait for both closes: router-a may learn of the second a moment
    # after the answer reached us.)
    closes = a_proc.wait_event("link.closed", count=2, stage="voting")
    assert [e["reason"] for e in closes] == ["peer-closed"] * 2
    assert [e for e in a_proc.events("link.closed") if e["stage"] == "delivery"] == []

    a_proc.sigkill()
    [a_proc] = mesh.start(a)
    # Its listener serves links and votes once its store is open: router-b's
    # link back in delivery shows it.
    a_proc.wait_delivery("router-b")
    again = ask(a, secret, PRIMARY, 1)
    assert (again.granted, again.reason) == (False, STALE_EPOCH)
    assert [(v["candidate"], v["granted"]) for v in a_proc.events("ha.vote")] == [
        (BACKUP, True), (PRIMARY, False), (PRIMARY, False)]
