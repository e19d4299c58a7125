"""
Epochs on routing links (docs/protocol.md, "Epochs"): one end of a link
at a time, the test playing the peer, as in L{test_machine}.

The two instances of an HA pair share one router name.  A link from a
higher epoch than the link holding the name takes its place at once
(that link closes C{superseded}); a lower epoch than the highest ever
seen for the name is refused C{stale-epoch}; the highest epoch is made
durable (L{FakeEpochStore} here) before the link that raised it is
admitted.
"""

import pytest
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.task import Clock

from meshroute import events
from meshroute.link import reasons, stages
from meshroute.link.context import RouterContext
from meshroute.link.epochs import PeerEpochs
from meshroute.link.registry import LinkRegistry
from meshroute.wire.frames import Authenticate, Authenticated, Hello, Recovery, Reject, Welcome
from support.fakes import RecordingEngine
from support.link_peer import KEEPALIVE, LOCAL, REJECT_DELAY, REMOTE, STAGE_TIMEOUT, Router


class FakeEpochStore:
    """
    The store's peer epochs (L{meshroute.interfaces.IPeerEpochs}): saves
    are recorded, and held (C{hold}) or failed (C{failing}) on demand.
    """

    def __init__(self, saved: dict[str, int] | None = None) -> None:
        self.saved = dict(saved or {})
        self.held: list[Deferred] = []
        self.hold = False
        self.failing = False

    def peer_epochs(self):
        return succeed(dict(self.saved))

    def save_peer_epoch(self, peer: str, epoch: int):
        if self.failing:
            return fail(OSError("disk I/O error"))
        if self.hold:
            d = Deferred()
            self.held.append(d)
            return d.addCallback(lambda _: self.saved.__setitem__(peer, epoch))
        self.saved[peer] = max(epoch, self.saved.get(peer, 0))
        return succeed(None)


def make_router(tmp_path, epoch: int = 0, store: FakeEpochStore | None = None) -> Router:
    clock = Clock()
    registry = LinkRegistry()
    engine = RecordingEngine()
    peer_epochs = PeerEpochs(store if store is not None else FakeEpochStore(), registry)
    peer_epochs.load()
    context = RouterContext(name=LOCAL, clock=clock, events=events.EventLog(str(tmp_path), LOCAL, clock),
                            registry=registry, engine=engine, epoch=epoch,
                            peer_epochs=peer_epochs)
    return Router(context, clock, registry, engine, str(tmp_path))


@pytest.fixture
def store() -> FakeEpochStore:
    return FakeEpochStore()


@pytest.fixture
def router(tmp_path, store):
    router = make_router(tmp_path, store=store)
    yield router
    router.context.events.close()


def listener_link(router: Router, epoch: int, versions=(2, 3)):
    """
    A connector played by the test, as the instance of REMOTE serving in
    C{epoch}, through authentication; its frames so far are read.
    """
    peer = router.listener()
    peer.send(Hello(list(versions), REMOTE, epoch))
    (peer.welcome,) = peer.expect(Welcome)
    peer.authenticate()
    return peer


def delivering_listener_link(router: Router, epoch: int):
    peer = listener_link(router, epoch)
    peer.expect(Authenticated, Recovery)
    peer.send(Recovery(0))
    assert peer.core.stage == stages.DELIVERY
    return peer


def assert_refused(peer, code: str) -> None:
    (reject,) = peer.expect(Reject)
    assert reject.code == code
    peer.advance(REJECT_DELAY)
    peer.assert_closed(reasons.REJECTED, "lose")


def assert_hello_refused(router: Router, epoch: int, code: str, versions=(3,)) -> None:
    """
    A connector from C{epoch} is refused C{code} on its Hello.
    """
    peer = router.listener()
    peer.send(Hello(list(versions), REMOTE, epoch))
    assert_refused(peer, code)


# -- the listener ---------------------------------------------------------


def test_a_higher_epoch_takes_the_name_over_at_once(router):
    old = delivering_listener_link(router, epoch=1)
    old_channel = router.engine.channels[REMOTE]

    new = router.listener()
    new.send(Hello([2, 3], REMOTE, 2))
    (new.welcome,) = new.expect(Welcome)  # not refused name-in-use
    assert old.how_closed == "open"  # not before the new one proved the secret
    new.authenticate()

    new.expect(Authenticated, Recovery)
    assert old_channel.is_closed  # at once: its outbox is the new link's now
    record = old.assert_closed(reasons.SUPERSEDED, "abort")
    assert record["detail"] == f"{REMOTE} serves in epoch 2 now, this link in epoch 1"
    new.send(Recovery(0))
    assert new.core.stage == stages.DELIVERY
    assert router.registry.links() == [new.link]
    assert new.link.describe()["peer_epoch"] == 2
    assert router.context.peer_epochs.highest(REMOTE) == 2


def test_a_lower_epoch_than_seen_is_refused_stale_epoch(router):
    delivering_listener_link(router, epoch=2)
    assert_hello_refused(router, 1, reasons.STALE_EPOCH)


def test_a_lower_epoch_is_refused_with_no_link_up(router):
    """
    The highest epoch seen counts, not the epoch of the link up now.
    """
    link = delivering_listener_link(router, epoch=2)
    link.complete_close()
    assert_hello_refused(router, 1, reasons.STALE_EPOCH)
    again = delivering_listener_link(router, epoch=2)  # the same epoch is welcome back
    assert again.core.stage == stages.DELIVERY


def test_the_same_epoch_while_its_link_is_up_is_name_in_use(router):
    delivering_listener_link(router, epoch=1)
    assert_hello_refused(router, 1, reasons.NAME_IN_USE)


def test_a_router_without_ha_is_name_in_use_as_before(router):
    delivering_listener_link(router, epoch=0)
    assert_hello_refused(router, 0, reasons.NAME_IN_USE, versions=(2,))


def test_a_higher_epoch_without_the_secret_changes_nothing(router):
    """
    A Hello is not authenticated: only a proven peer raises an epoch or
    closes a link, so that nobody can fence a router by claiming its name.
    """
    old = delivering_listener_link(router, epoch=1)
    impostor = router.listener()
    impostor.send(Hello([3], REMOTE, 99))
    (impostor.welcome,) = impostor.expect(Welcome)
    impostor.authenticate(secret=b"not the shared secret")
    assert_refused(impostor, reasons.AUTH_FAILED)
    assert old.how_closed == "open"
    assert router.context.peer_epochs.highest(REMOTE) == 1


def test_the_new_epoch_is_durable_before_the_link_is_admitted(router, store):
    old = delivering_listener_link(router, epoch=1)
    store.hold = True
    new = listener_link(router, epoch=2)
    assert new.written() == []
    assert old.how_closed == "open"
    assert router.context.peer_epochs.highest(REMOTE) == 1
    store.held[0].callback(None)
    new.expect(Authenticated, Recovery)
    assert store.saved == {REMOTE: 2}
    old.assert_closed(reasons.SUPERSEDED, "abort")


def test_the_stage_timer_runs_while_the_epoch_is_saved(router, store):
    store.hold = True
    new = listener_link(router, epoch=2)
    new.advance(STAGE_TIMEOUT)
    new.assert_closed(reasons.STAGE_TIMEOUT, "abort")
    store.held[0].callback(None)  # the save that ends after the close admits nothing
    assert new.written() == []
    assert router.registry.links() == []


def test_a_link_closed_while_its_epoch_was_saved_leaves_the_name_free(router, store):
    """
    The save that ends after the link closed claims no name for it: a
    later link of the same epoch is not refused C{name-in-use} by a link
    that is gone.
    """
    store.hold = True
    new = listener_link(router, epoch=2)
    new.advance(STAGE_TIMEOUT)
    new.assert_closed(reasons.STAGE_TIMEOUT, "abort")
    store.held[0].callback(None)
    assert router.registry.holder(REMOTE) is None
    store.hold = False
    again = listener_link(router, epoch=2)
    again.expect(Authenticated, Recovery)


def test_an_epoch_that_cannot_be_saved_closes_the_link_store_failed(router, store):
    old = delivering_listener_link(router, epoch=1)
    store.failing = True
    new = listener_link(router, epoch=2)
    new.assert_closed(reasons.STORE_FAILED, "abort")
    assert old.how_closed == "open"
    assert router.context.peer_epochs.highest(REMOTE) == 1


def test_epochs_seen_before_a_restart_are_refused_after_it(tmp_path):
    router = make_router(tmp_path, store=FakeEpochStore({REMOTE: 5}))
    assert_hello_refused(router, 4, reasons.STALE_EPOCH)
    router.context.events.close()


@pytest.mark.parametrize("versions, sent", [((2, 3), 7), ((2,), 0)])
def test_welcome_carries_the_listener_s_epoch_from_version_3(tmp_path, versions, sent):
    router = make_router(tmp_path, epoch=7)
    peer = router.listener()
    peer.send(Hello(list(versions), REMOTE))
    (welcome,) = peer.expect(Welcome)
    assert welcome.epoch == sent
    router.context.events.close()


# -- the connector --------------------------------------------------------


def welcomed_connector(router: Router, epoch: int):
    peer = router.connector()
    (hello,) = peer.expect(Hello)
    peer.send(Welcome(3, REMOTE, 1000, peer.challenge, epoch))
    return peer, hello


def test_hello_carries_the_connector_s_epoch(tmp_path):
    router = make_router(tmp_path, epoch=4)
    peer = router.connector()
    (hello,) = peer.expect(Hello)
    assert hello.epoch == 4
    router.context.events.close()


def test_a_connector_refuses_an_instance_older_than_seen(tmp_path):
    """
    A connector whose endpoints are a pair's two instances reached the
    stale one: it refuses it (and its rotation tries the next endpoint).
    """
    router = make_router(tmp_path, store=FakeEpochStore({REMOTE: 3}))
    peer, _ = welcomed_connector(router, epoch=2)
    (reject,) = peer.expect(Reject)
    assert reject.code == reasons.STALE_EPOCH
    peer.assert_closed(reasons.REJECTED, "lose")
    router.context.events.close()


def test_a_connector_reaching_a_newer_instance_supersedes_the_older_link(router):
    old = delivering_listener_link(router, epoch=1)
    new, _ = welcomed_connector(router, epoch=2)
    (new.authenticate_frame,) = new.expect(Authenticate)
    assert old.how_closed == "open"
    new.authenticated()
    new.expect(Recovery)
    old.assert_closed(reasons.SUPERSEDED, "abort")
    assert router.context.peer_epochs.highest(REMOTE) == 2


def test_a_connector_takes_the_listener_s_recovery_while_its_epoch_is_saved(router, store):
    """
    The listener sends Recovery right after Authenticated; a connector
    still making the listener's new epoch durable keeps it, and enters
    delivery once the epoch is saved.
    """
    store.hold = True
    new, _ = welcomed_connector(router, epoch=2)
    (new.authenticate_frame,) = new.expect(Authenticate)
    new.send(Authenticated(new.proof()), Recovery(0))
    assert new.written() == [] and new.how_closed == "open"
    store.held[0].callback(None)
    new.expect(Recovery)
    assert new.core.stage == stages.DELIVERY
    assert router.registry.holder(REMOTE) is new.link


def test_a_connector_reaching_the_same_epoch_as_a_live_link_is_name_in_use(router):
    delivering_listener_link(router, epoch=2)
    new, _ = welcomed_connector(router, epoch=2)
    (reject,) = new.expect(Reject)
    assert reject.code == reasons.NAME_IN_USE


def test_a_closing_link_gives_a_newer_epoch_its_name_at_once(router):
    """
    A link that is closing (here: its keepalive ran out) holds the name
    until its connection is gone; a newer epoch does not wait for that.
    """
    old = delivering_listener_link(router, epoch=1)
    old_channel = router.engine.channels[REMOTE]
    old.advance(5 * KEEPALIVE, step=KEEPALIVE)
    assert old.how_closed == "abort"
    new = listener_link(router, epoch=2)
    new.expect(Authenticated, Recovery)
    assert old_channel.is_closed
    new.send(Recovery(0))
    assert new.core.stage == stages.DELIVERY
    old.complete_close()
    assert old.closed_record()["reason"] == reasons.KEEPALIVE
    assert router.registry.holder(REMOTE) is new.link


def test_a_newer_epoch_heard_in_routes_supersedes_the_link_once_durable(router, store):
    """
    L{PeerEpochs.heard}: a route advertisement of the peer from a newer
    epoch (relayed by another router) closes the link from the older one.
    """
    old = delivering_listener_link(router, epoch=1)
    router.context.peer_epochs.heard(REMOTE, 1)
    assert old.how_closed == "open"
    store.hold = True
    router.context.peer_epochs.heard(REMOTE, 2)
    assert old.how_closed == "open"
    store.held[0].callback(None)
    assert router.engine.channels[REMOTE].is_closed
    old.assert_closed(reasons.SUPERSEDED, "abort")
    assert router.context.peer_epochs.highest(REMOTE) == 2
    assert router.registry.holder(REMOTE) is None


def test_a_connector_holds_the_listener_s_recovery_while_its_epoch_is_saved(router, store):
    """
    A real listener sends its Recovery right after its proof; the
    connector, still saving the listener's new epoch, takes it once its
    verdict is made instead of calling it out of stage.
    """
    store.hold = True
    new, _ = welcomed_connector(router, epoch=2)
    (new.authenticate_frame,) = new.expect(Authenticate)
    new.authenticated()
    new.send(Recovery(0))
    assert new.how_closed == "open"
    store.held[0].callback(None)
    new.expect(Recovery)
    assert new.core.stage == stages.DELIVERY


def test_a_connector_closed_while_its_peer_s_epoch_is_saved_claims_no_name(router, store):
    store.hold = True
    new, _ = welcomed_connector(router, epoch=2)
    (new.authenticate_frame,) = new.expect(Authenticate)
    new.authenticated()
    new.advance(STAGE_TIMEOUT)
    new.assert_closed(reasons.STAGE_TIMEOUT, "abort")
    store.held[0].callback(None)
    assert not router.registry.is_claimed(REMOTE)
