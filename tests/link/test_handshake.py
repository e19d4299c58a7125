"""
The handshake's checks (L{meshroute.link.handshake}) seen from the wire,
one end of a link at a time, the test playing the peer as in
L{test_machine}: the version chosen, what each side refuses and how it
closes, and a peer's router name claimed only once it is authenticated.

Sections: versions; rejections by the listener; rejections seen by the
connector; the registry.
"""

import pytest

from meshroute import events
from meshroute.link import auth, handshake, reasons
from meshroute.wire.frames import (
    Authenticate,
    Authenticated,
    Hello,
    Keepalive,
    Reject,
    Welcome,
)
from support.link_peer import (  # noqa: F401 (router: a fixture)
    LOCAL,
    REMOTE,
    SECRET,
    EPSILON,
    REJECT_DELAY,
    Router,
    _Probe,
    router,
)


# -- versions -------------------------------------------------------------


@pytest.mark.parametrize(
    "ours, theirs, chosen",
    [
        ((1,), [1, 99], 1),
        ((1,), [99, 1], 1),
        ((1, 2), [1], 1),
        ((1, 2), [1, 2, 3], 2),
        ((1, 2), [2], 2),
    ],
)
def test_listener_welcomes_with_newest_common_version(router, monkeypatch, ours, theirs, chosen):
    monkeypatch.setattr(handshake, "SUPPORTED_VERSIONS", ours)
    peer = router.listener()
    peer.hello(versions=theirs)
    (welcome,) = peer.expect(Welcome)
    assert welcome.version == chosen
    assert peer.core.version == chosen


# -- rejections by the listener ------------------------------------------


def _pretend_claimed(router: Router) -> None:
    assert router.registry.claim(REMOTE, _Probe(REMOTE))


REJECTIONS = [
    pytest.param({}, {"router": LOCAL}, None, reasons.OWN_NAME, id="own-name"),
    pytest.param({}, {}, _pretend_claimed, reasons.NAME_IN_USE, id="name-in-use"),
    pytest.param({}, {"versions": [99]}, None, reasons.VERSION, id="version"),
    pytest.param({}, {"versions": []}, None, reasons.VERSION, id="no-versions"),
    pytest.param(
        {"allowed_routers": frozenset({"router-c"})}, {}, None, reasons.NOT_ALLOWED,
        id="not-allowed",
    ),
    pytest.param({}, {"router": "bad name!"}, None, reasons.NOT_ALLOWED, id="malformed-name"),
    pytest.param({}, {"router": ""}, None, reasons.NOT_ALLOWED, id="empty-name"),
    pytest.param({}, {"router": "x" * 65}, None, reasons.NOT_ALLOWED, id="long-name"),
]


@pytest.mark.parametrize("settings, hello, setup, code", REJECTIONS)
def test_listener_rejects_hello(router, settings, hello, setup, code):
    if setup is not None:
        setup(router)
    peer = router.listener(**settings)
    peer.advance(0.5)  # the delay counts from the Reject, not the connection
    peer.hello(**hello)

    (reject,) = peer.expect(Reject)
    assert reject.code == code
    assert reject.detail
    (rejected,) = peer.events(events.LINK_REJECTED)
    assert rejected["code"] == code
    assert rejected["by"] == "local"
    assert rejected["direction"] == "listener"

    peer.advance(REJECT_DELAY - EPSILON)
    assert peer.how_closed == "open"
    peer.advance(EPSILON)
    record = peer.assert_closed(reasons.REJECTED, "lose")
    assert record["time"] == 0.5 + REJECT_DELAY
    assert record["stage"] == "connect"
    assert record["detail"] == code
    assert peer.stages() == ["connect"]
    assert peer.written() == []


def test_listener_rejects_wrong_proof(router):
    peer = router.listener()
    peer.hello_welcomed()
    peer.advance(0.5)
    peer.authenticate(secret=b"not the shared secret")

    (reject,) = peer.expect(Reject)
    assert reject.code == reasons.AUTH_FAILED
    (rejected,) = peer.events(events.LINK_REJECTED)
    assert (rejected["code"], rejected["by"], rejected["peer"]) == (
        reasons.AUTH_FAILED, "local", REMOTE,
    )
    peer.advance(REJECT_DELAY - EPSILON)
    assert peer.how_closed == "open"
    peer.advance(EPSILON)
    record = peer.assert_closed(reasons.REJECTED, "lose")
    assert record["stage"] == "authentication"
    assert record["time"] == 0.5 + REJECT_DELAY
    assert record["detail"] == reasons.AUTH_FAILED
    assert not router.holds(REMOTE)  # the failed link gave the name back


def test_listener_rejects_proof_replayed_for_another_name(router):
    """
    A proof is bound to the names: one valid for router-c does not let
    its holder in as router-b.
    """
    peer = router.listener()
    peer.hello_welcomed()
    stolen = auth.proof(SECRET, "connector", "router-c", LOCAL, peer.challenge,
                        peer.welcome.challenge)
    peer.send(Authenticate(stolen, peer.challenge))
    (reject,) = peer.expect(Reject)
    assert reject.code == reasons.AUTH_FAILED


def test_rejected_listener_ignores_further_frames(router):
    peer = router.listener()
    peer.hello(router=LOCAL)
    peer.expect(Reject)
    peer.send(Hello([2], REMOTE), Keepalive())
    peer.protocol.dataReceived(b"\xff\xff\xff\xff garbage")
    assert peer.written() == []
    assert peer.how_closed == "open"
    peer.advance(REJECT_DELAY)
    peer.assert_closed(reasons.REJECTED, "lose")


def test_rejected_peer_that_leaves_first_is_still_recorded_as_rejected(router):
    """
    A connector closes as soon as it reads the Reject, usually before the
    listener's reject-disconnect-delay runs out.
    """
    peer = router.listener()
    peer.hello(router=LOCAL)
    peer.expect(Reject)
    peer.complete_close()
    record = peer.closed_record()
    assert record["reason"] == reasons.REJECTED
    assert peer.how_closed == "open"  # the peer closed, not us
    peer.advance(REJECT_DELAY)  # the cancelled delay does nothing
    assert len(peer.events(events.LINK_CLOSED)) == 1


# -- rejections seen by the connector ------------------------------------


@pytest.mark.parametrize("stage", ["connect", "authentication"])
def test_connector_rejected_by_listener(router, stage):
    peer = router.connector()
    peer.expect(Hello)
    code = reasons.NAME_IN_USE if stage == "connect" else reasons.AUTH_FAILED
    if stage == "authentication":
        peer.welcome_answered()
    peer.send(Reject(code, "go away"))

    (rejected,) = peer.events(events.LINK_REJECTED)
    assert (rejected["code"], rejected["detail"], rejected["by"]) == (code, "go away", "peer")
    assert peer.written() == []  # no Reject back
    record = peer.assert_closed(reasons.REJECTED, "lose")
    assert record["detail"] == code
    assert record["stage"] == stage
    assert peer.deliveries == []
    assert not router.holds(REMOTE)


@pytest.mark.parametrize(
    "welcome, code",
    [
        pytest.param({"router": "router-z"}, reasons.UNEXPECTED_PEER, id="unexpected-peer"),
        pytest.param({"version": 99}, reasons.VERSION, id="version"),
    ],
)
def test_connector_refuses_welcome(router, welcome, code):
    peer = router.connector()
    peer.expect(Hello)
    peer.welcome(**welcome)

    (reject,) = peer.expect(Reject)
    assert reject.code == code
    (rejected,) = peer.events(events.LINK_REJECTED)
    assert (rejected["code"], rejected["by"]) == (code, "local")
    record = peer.assert_closed(reasons.REJECTED, "lose")  # at once, no delay
    assert record["detail"] == code
    assert record["stage"] == "connect"
    assert not router.holds(REMOTE)
    assert not router.holds("router-z")


def test_connector_refuses_when_name_in_use(router):
    _pretend_claimed(router)
    peer = router.connector()
    peer.expect(Hello)
    peer.welcome()
    (reject,) = peer.expect(Reject)
    assert reject.code == reasons.NAME_IN_USE
    peer.assert_closed(reasons.REJECTED, "lose")
    assert router.holds(REMOTE)  # still the other link's


def test_connector_refuses_wrong_listener_proof(router):
    peer = router.connector()
    peer.expect(Hello)
    peer.welcome_answered()
    peer.authenticated(secret=b"not the shared secret")

    (reject,) = peer.expect(Reject)
    assert reject.code == reasons.AUTH_FAILED
    (rejected,) = peer.events(events.LINK_REJECTED)
    assert (rejected["code"], rejected["by"]) == (reasons.AUTH_FAILED, "local")
    record = peer.assert_closed(reasons.REJECTED, "lose")
    assert record["stage"] == "authentication"
    assert peer.deliveries == []


def test_connector_refuses_reflected_connector_proof(router):
    """
    A listener that only echoes the connector's own proof back has not
    shown it knows the secret.
    """
    peer = router.connector()
    peer.expect(Hello)
    authenticate = peer.welcome_answered()
    peer.send(Authenticated(authenticate.proof))
    (reject,) = peer.expect(Reject)
    assert reject.code == reasons.AUTH_FAILED


# -- the registry --------------------------------------------------------


def test_name_is_connected_only_once_and_released_on_close(router):
    first = router.listener()
    first.to_delivery()

    second = router.listener()
    second.hello()
    (reject,) = second.expect(Reject)
    assert reject.code == reasons.NAME_IN_USE
    second.advance(REJECT_DELAY)
    second.assert_closed(reasons.REJECTED, "lose")
    assert router.holds(REMOTE)  # the rejected link did not release it
    assert first.how_closed == "open"

    first.complete_close()
    assert first.closed_record()["reason"] == reasons.PEER_CLOSED
    assert not router.holds(REMOTE)

    third = router.listener()
    third.to_delivery()
    assert router.registry.links() == [third.link]


def test_name_is_claimed_only_once_authenticated(router):
    """
    A connection that has only said Hello holds nothing, so a client that
    does not know the secret cannot squat a router's name.  The first link
    to authenticate claims the name; one authenticating later is refused,
    and once the first is gone the name is free again.
    """
    squatter = router.listener()
    squatter.hello_welcomed()
    assert not router.holds(REMOTE)

    first = router.listener()
    first.to_delivery()
    assert router.holds(REMOTE)

    squatter.authenticate()
    assert squatter.expect(Reject)[0].code == reasons.NAME_IN_USE
    assert router.registry.is_claimed(REMOTE)

    late = router.listener()
    late.hello()
    assert late.expect(Reject)[0].code == reasons.NAME_IN_USE  # refused early

    first.link.shutdown()
    first.assert_closed(reasons.SHUTDOWN, "lose")
    assert not router.holds(REMOTE)
    again = router.listener()
    again.to_delivery()
    assert router.holds(REMOTE)


def test_connector_releases_name_on_close(router):
    first = router.connector()
    first.to_delivery()
    assert router.holds(REMOTE)
    first.link.shutdown()
    first.assert_closed(reasons.SHUTDOWN, "lose")
    assert not router.holds(REMOTE)

    second = router.connector()
    second.to_delivery()
    assert second.deliveries == [1]
