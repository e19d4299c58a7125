"""
Tests for the client's side of two-phase commit (docs/client-protocol.md,
"Two-phase commit"): PEP 249's calls on a transacted client against a
router of version 7 the tests script frame by frame, on a C{task.Clock}:
the frames each call writes, the state rules PEP 249 sets, how the
router's refusals read, and the XA_RETRY rule: what becomes of each call
when its session is recreated or given up on.
"""

import pytest

from meshroute.client import (
    FAILOVER,
    ClientError,
    ClientOptions,
    HeuristicOutcome,
    TransactionOutcomeUnknown,
    TransactionRetry,
    TransactionRolledBack,
    TransactionStateError,
    UnblockedError,
    UnknownTransaction,
    Xid,
    connect_endpoint,
)
from meshroute.wire import client_frames as f

from support.client_testing import failure_of, kept_clients, result_of  # noqa: F401
from support.fake_router import OTHER_SESSION, ROUTER, SESSION
from support.scripted_sessions import Session, endpoint  # noqa: F401 (a fixture)

XID = Xid(1, "tm-1:0042", "mq")


def opened(session_id: str, version: int = 7) -> f.Opened:
    return f.OpenedWithTopology(version, session_id, ROUTER, 60000, False, 0, 0, [])


class TwoPhaseSession(Session):
    """
    A transacted client connected to a scripted router of version 7.
    """

    def __init__(self, clock, endpoint, version: int = 7, **options) -> None:  # noqa: F811
        options.setdefault("client_id", "tm")
        options.setdefault("transacted", True)
        self.clock = clock
        self.endpoint = endpoint
        d = connect_endpoint(clock, endpoint, ClientOptions(**options))
        self.router = endpoint.accept()
        (self.first_open,) = self.router.frames()
        self.router.send(opened(SESSION, version))
        self.client = result_of(d)
        self.events: list[str] = []
        self.client.add_failure_listener(self.events.append)

    def recreated(self, session_id: str = OTHER_SESSION) -> None:
        self.router.lose()
        self.reconnect()
        self.router.send(opened(session_id))


@pytest.fixture
def s(clock, endpoint):  # noqa: F811
    return TwoPhaseSession(clock, endpoint, reconnect_attempts=1)


def prepared(s) -> tuple:
    """
    Begin, send and prepare XID; the router confirms the prepare.

    @return: the send's Deferred and the prepare's.
    """
    s.client.tpc_begin(XID)
    sent = s.client.send("out", b"x")
    preparing = s.client.tpc_prepare()
    assert s.router.frames() == [f.Begin(1), f.Send(2, "out", {}, b"x", True, ""),
                                 f.Prepare(3, *XID)]
    s.router.send(f.Confirm(3, ""))
    assert result_of(preparing) is None
    return sent, preparing


def test_xid_makes_a_checked_named_triple(s):
    xid = s.client.xid(7, "gtrid", "")
    assert xid == (7, "gtrid", "") and xid.format_id == 7
    for bad in ((-1, "g", ""), (1, "", ""), (1, "g" * 65, ""), (1, "g", "b" * 65),
                (2**31, "g", "")):
        with pytest.raises(ValueError):
            s.client.xid(*bad)
    with pytest.raises(ValueError):
        s.client.tpc_begin((1, "g"))


def test_prepare_then_commit(s):
    sent, _ = prepared(s)
    assert not sent.called  # answered when the transaction is decided
    committed = s.client.tpc_commit()
    assert s.router.frames() == [f.CommitXid(4, *XID, False)]
    s.router.send(f.Confirm(2, "id-2"), f.Confirm(4, ""))
    assert result_of(sent) == "id-2" and result_of(committed) is None
    # The next two-phase transaction may begin.
    s.client.tpc_begin(Xid(1, "tm-1:0043", "mq"))


def test_a_transaction_without_work_is_still_prepared_under_its_xid(s):
    s.client.tpc_begin(XID)
    preparing = s.client.tpc_prepare()
    assert s.router.frames() == [f.Begin(1), f.Prepare(2, *XID)]
    s.router.send(f.Confirm(2, ""))
    assert result_of(preparing) is None


def test_a_commit_without_prepare_is_a_one_phase_commit(s):
    s.client.tpc_begin(XID)
    sent = s.client.send("out", b"x")
    committed = s.client.tpc_commit()
    assert s.router.frames() == [f.Begin(1), f.Send(2, "out", {}, b"x", True, ""),
                                 f.CommitXid(3, *XID, True)]
    s.router.send(f.Confirm(2, "id-2"), f.Confirm(3, ""))
    assert result_of(sent) == "id-2" and result_of(committed) is None


def test_a_rollback_without_prepare_is_a_plain_rollback(s):
    s.client.tpc_begin(XID)
    sent = s.client.send("out", b"x")
    rolled_back = s.client.tpc_rollback(XID)
    assert s.router.frames()[-1] == f.Rollback(3)
    s.router.send(f.Error(2, f.ROLLED_BACK, "rolled back"), f.Confirm(3, ""))
    assert isinstance(failure_of(sent), TransactionRolledBack)
    assert result_of(rolled_back) is None


def test_recovery_decides_transactions_by_xid_and_needs_no_transacted_client(clock, endpoint):  # noqa: F811
    s = TwoPhaseSession(clock, endpoint, transacted=False)
    recovered = s.client.tpc_recover()
    assert s.router.frames() == [f.Recover(1)]
    s.router.send(f.Recovered(1, [list(XID), [0, "other", ""]]))
    assert result_of(recovered) == [XID, Xid(0, "other", "")]
    committed = s.client.tpc_commit(XID)
    rolled_back = s.client.tpc_rollback((0, "other", ""))
    assert s.router.frames() == [f.CommitXid(2, *XID, False), f.RollbackXid(3, 0, "other", "")]
    s.router.send(f.Confirm(2, ""), f.Confirm(3, ""))
    assert result_of(committed) is None and result_of(rolled_back) is None
    assert failure_of(s.client.tpc_prepare()).code == "not-transacted"


def test_the_router_s_refusals_say_what_became_of_the_transaction(s):
    calls = [s.client.tpc_commit(XID), s.client.tpc_rollback(XID), s.client.tpc_commit(XID),
             s.client.tpc_rollback(XID)]
    s.router.frames()
    s.router.send(f.Error(1, f.UNKNOWN_XID, "no such"), f.Error(2, f.HEURISTIC_COMMIT, "done"),
                  f.Error(3, f.HEURISTIC_MIXED, "gone"), f.Error(4, f.INTERNAL_ERROR, "disk"))
    errors = [failure_of(d) for d in calls]
    assert [type(e) for e in errors] == [UnknownTransaction, HeuristicOutcome, HeuristicOutcome,
                                         ClientError]
    assert [e.code for e in errors] == [f.UNKNOWN_XID, f.HEURISTIC_COMMIT, f.HEURISTIC_MIXED,
                                        f.INTERNAL_ERROR]


def test_a_refused_prepare_rolled_the_transaction_back(s):
    s.client.tpc_begin(XID)
    sent = s.client.send("out", b"x")
    preparing = s.client.tpc_prepare()
    s.router.frames()
    s.router.send(f.Error(2, f.ROLLED_BACK, "rolled back"),
                  f.Error(3, f.DUPLICATE_XID, "taken"))
    error = failure_of(preparing)
    assert isinstance(error, TransactionRolledBack) and error.code == f.DUPLICATE_XID
    assert isinstance(failure_of(sent), TransactionRolledBack)
    # Nothing waits for a decision: a new transaction may begin.
    s.client.tpc_begin(XID)


def test_pep_249_s_state_rules(s):
    assert isinstance(failure_of(s.client.tpc_prepare()), TransactionStateError)
    assert isinstance(failure_of(s.client.tpc_commit()), TransactionStateError)
    sent = s.client.send("out", b"plain")
    with pytest.raises(TransactionStateError):
        s.client.tpc_begin(XID)  # the send began a transaction
    rolled_back = s.client.rollback()
    s.router.frames()
    s.router.send(f.Error(2, f.ROLLED_BACK, ""), f.Confirm(3, ""))
    assert result_of(rolled_back) is None
    assert isinstance(failure_of(sent), TransactionRolledBack)
    s.client.tpc_begin(XID)
    assert isinstance(failure_of(s.client.commit()), TransactionStateError)
    assert s.router.frames() == []


def test_nothing_is_sent_between_prepare_and_its_decision(s):
    sent, _ = prepared(s)
    with pytest.raises(TransactionStateError):
        s.client.tpc_begin(Xid(1, "next", ""))
    refused = s.client.send("out", b"too soon")
    s.turn()
    assert isinstance(failure_of(refused), TransactionStateError)
    assert s.router.frames() == []
    rolled_back = s.client.tpc_rollback()
    assert s.router.frames() == [f.RollbackXid(4, *XID)]
    s.router.send(f.Error(2, f.ROLLED_BACK, ""), f.Confirm(4, ""))
    assert result_of(rolled_back) is None
    assert isinstance(failure_of(sent), TransactionRolledBack)
    s.client.tpc_begin(Xid(1, "next", ""))


def test_a_router_older_than_version_7_cannot(clock, endpoint):  # noqa: F811
    s = TwoPhaseSession(clock, endpoint, version=6)
    with pytest.raises(ClientError) as raised:
        s.client.tpc_begin(XID)
    assert raised.value.code == "unsupported"
    assert failure_of(s.client.tpc_recover()).code == "unsupported"
    assert s.router.frames() == []


def test_a_two_phase_transaction_that_fails_over_to_an_older_router_is_rolled_back(s):
    s.client.tpc_begin(XID)
    s.router.lose()
    s.reconnect()
    s.router.send(opened(OTHER_SESSION, version=6))
    assert failure_of(s.client.tpc_prepare()).code == "unsupported"
    # It is over: the client goes on with plain transactions.
    sent = s.client.send("out", b"x")
    committed = s.client.commit()
    assert s.router.frames() == [f.Begin(1), f.Send(2, "out", {}, b"x", True, ""), f.Commit(3)]
    s.router.send(f.Confirm(2, "id-2"), f.Confirm(3, ""))
    assert result_of(sent) == "id-2" and result_of(committed) is None


# -- failover: the XA_RETRY rule ---------------------------------------------------


def test_a_commit_lost_in_flight_raises_transaction_retry_and_is_retried_by_xid(s):
    sent, _ = prepared(s)
    committed = s.client.tpc_commit()
    s.router.frames()
    s.recreated()
    error = failure_of(committed)
    assert isinstance(error, TransactionRetry) and error.code == "retry"
    assert isinstance(error, TransactionOutcomeUnknown)
    assert type(failure_of(sent)) is UnblockedError
    assert s.events == [FAILOVER]
    # The manager commits again: in the new session, by xid, as the
    # prepared transaction it still awaits (no argument needed).
    again = s.client.tpc_commit()
    assert s.router.frames() == [f.CommitXid(1, *XID, False)]
    s.router.send(f.Confirm(1, ""))
    assert result_of(again) is None
    s.client.tpc_begin(Xid(1, "next", ""))


def test_a_one_phase_commit_lost_in_flight_raises_transaction_retry(s):
    s.client.tpc_begin(XID)
    sent = s.client.send("out", b"x")
    committed = s.client.tpc_commit()
    s.router.frames()
    s.recreated()
    assert isinstance(failure_of(committed), TransactionRetry)
    assert type(failure_of(sent)) is UnblockedError
    retried = s.client.tpc_commit(XID)
    assert s.router.frames() == [f.CommitXid(1, *XID, False)]
    s.router.send(f.Error(1, f.UNKNOWN_XID, "never committed"))
    assert isinstance(failure_of(retried), UnknownTransaction)


def test_a_decision_not_yet_written_goes_to_the_next_session(s):
    sent, _ = prepared(s)
    s.router.lose()
    committed = s.client.tpc_commit()
    s.reconnect()
    s.router.send(opened(OTHER_SESSION))
    assert type(failure_of(sent)) is UnblockedError
    assert s.router.frames() == [f.CommitXid(1, *XID, False)]
    s.router.send(f.Confirm(1, ""))
    assert result_of(committed) is None


def test_a_prepare_lost_in_flight_is_rolled_back_in_the_next_session(s):
    s.client.tpc_begin(XID)
    sent = s.client.send("out", b"x")
    preparing = s.client.tpc_prepare()
    s.router.frames()
    s.recreated()
    assert s.router.frames() == [f.RollbackXid(1, *XID)]
    assert not preparing.called
    s.router.send(f.Error(1, f.UNKNOWN_XID, "it was not prepared"))
    error = failure_of(preparing)
    assert isinstance(error, TransactionRolledBack) and "rolled back" in error.detail
    assert type(failure_of(sent)) is UnblockedError
    s.client.tpc_begin(XID)


def test_a_prepare_lost_when_the_client_gives_up_has_an_unknown_outcome(clock, endpoint):  # noqa: F811
    s = TwoPhaseSession(clock, endpoint)
    s.client.tpc_begin(XID)
    preparing = s.client.tpc_prepare()
    s.router.frames()
    s.router.lose()
    assert type(failure_of(preparing)) is TransactionOutcomeUnknown


def test_a_reattached_session_replays_the_decision_and_nothing_is_retried(clock, endpoint):  # noqa: F811
    s = TwoPhaseSession(clock, endpoint, confirmation_window_size=100_000, reconnect_attempts=1)
    sent, _ = prepared(s)
    committed = s.client.tpc_commit()
    s.router.frames()
    s.router.lose()
    s.reconnect()
    s.router.send(f.OpenedWithTopology(7, SESSION, ROUTER, 60000, True, 3, 0, []))
    assert s.router.frames() == [f.CommitXid(4, *XID, False)]
    s.router.send(f.Confirm(2, "id-2"), f.Confirm(4, ""))
    assert result_of(sent) == "id-2" and result_of(committed) is None
