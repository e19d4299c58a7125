"""
Whether a client's send is refused now (meshroute.router.admission):
pure, over recording fakes of the routes, the store's backlog and the
non-persistent path.
"""

from meshroute.router.admission import Admission, BacklogFull, DiskFull, UnknownRouter


class Routes:
    def known(self, router):
        return router in ("r1", "r2")


class Store:
    def __init__(self):
        self.backlog = {}

    def backlog_depth(self, router):
        return self.backlog.get(router, 0)


class Transient:
    def __init__(self):
        self.waiting_for = {}

    def waiting(self, router):
        return self.waiting_for.get(router, 0)

    def full(self, router):
        return self.waiting(router) >= 2


def admission(max_backlog=3):
    store, transient = Store(), Transient()
    return Admission("r1", Routes(), store, transient, max_backlog), store, transient


def test_a_send_to_this_router_is_never_refused():
    admit, store, transient = admission(max_backlog=0)
    assert admit.refusal("r1", True) is None
    assert admit.refusal("r1", False) is None


def test_a_send_to_a_router_never_heard_of_is_refused():
    admit, _, _ = admission()
    assert isinstance(admit.refusal("r9", True), UnknownRouter)
    assert isinstance(admit.refusal("r9", False), UnknownRouter)


def test_sends_on_their_way_into_the_store_count_toward_the_bound():
    admit, store, _ = admission(max_backlog=3)
    store.backlog["r2"] = 1
    admit.submitted("r2")
    assert admit.accepting("r2") == 1
    assert admit.refusal("r2", True) is None
    admit.submitted("r2")
    assert isinstance(admit.refusal("r2", True), BacklogFull)
    admit.ended("r2")
    assert admit.accepting("r2") == 1
    assert admit.refusal("r2", True) is None
    assert admit.accepting("r3") == 0


def test_non_persistent_sends_are_bounded_by_the_transient_path():
    admit, store, transient = admission(max_backlog=1)
    store.backlog["r2"] = 5
    assert admit.refusal("r2", False) is None
    transient.waiting_for["r2"] = 2
    refusal = admit.refusal("r2", False)
    assert isinstance(refusal, BacklogFull)
    assert "2 non-persistent messages" in str(refusal)


class Disk:
    def __init__(self):
        self.low = True

    def describe(self):
        return "the disk is low"


def test_every_send_is_refused_while_the_disk_is_low():
    store, transient = Store(), Transient()
    disk = Disk()
    admit = Admission("r1", Routes(), store, transient, 3, disk)
    for router in ("r1", "r2", "r9"):
        for persistent in (True, False):
            refusal = admit.refusal(router, persistent)
            assert isinstance(refusal, DiskFull)
            assert (refusal.code, str(refusal)) == ("disk-full", "the disk is low")
    disk.low = False
    assert admit.refusal("r1", True) is None
