"""
Tests for the client's side of transactions (docs/client-protocol.md,
"Transactions"): a client made with C{transacted=True} against a router
the tests script frame by frame, on a C{task.Clock}: Begin before the
first send or acknowledgement, commit and rollback, and what becomes of
a transaction when its session is reattached, recreated or given up on.
"""

from meshroute.client import (
    DISCONNECT,
    FAILOVER,
    ClientError,
    TransactionOutcomeUnknown,
    TransactionRolledBack,
    UnblockedError,
    connect_endpoint,
)
from meshroute.wire import client_frames as f

from support.client_testing import failure_of, kept_clients, result_of  # noqa: F401
from support.fake_router import OTHER_SESSION, SESSION, ScriptedEndpoint
from support.scripted_sessions import Session, endpoint  # noqa: F401 (a fixture)


def transacted(clock, endpoint, **options) -> Session:
    options.setdefault("transacted", True)
    return Session(clock, endpoint, **options)


def test_a_transacted_client_offers_only_versions_with_transactions(clock, endpoint):
    s = transacted(clock, endpoint)
    assert s.first_open.versions == [2, 3, 4, 5, 6, 7, 8, 9]
    plain = Session(clock, ScriptedEndpoint())
    assert plain.first_open.versions == [1, 2, 3, 4, 5, 6, 7, 8, 9]


def test_a_router_without_transactions_refuses_a_transacted_client(clock, endpoint):
    d = connect_endpoint(clock, endpoint, client_id="c", transacted=True)
    router = endpoint.accept()
    router.frames()
    router.send(f.Error(0, f.UNSUPPORTED_VERSION, "this router speaks [1]"))
    assert failure_of(d).code == f.UNSUPPORTED_VERSION


def test_sends_and_acks_go_between_begin_and_commit(clock, endpoint):
    s = transacted(clock, endpoint)
    got = []
    subscribed = s.client.subscribe("in", got.append, prefetch=1)
    s.router.send(f.Confirm(1, ""))
    result_of(subscribed)
    s.router.send(f.Deliver(1, 1, "m1", "r", {}, b"in", False))
    got[0].ack()
    sent = s.client.send("out", b"x")
    committed = s.client.commit()
    assert s.router.frames() == [
        f.Subscribe(1, 1, "in", 1),
        f.Begin(2), f.Send(3, "out", {}, b"x", True, ""),
        f.Ack(4, [1]), f.Credit(5, 1, 1), f.Commit(6),
    ]
    s.router.send(f.Confirm(3, "id-3"), f.Confirm(6, ""))
    assert result_of(sent) == "id-3"
    assert result_of(committed) is None
    # The next transaction begins with its first send.
    s.client.send("out", b"y")
    assert s.router.frames() == [f.Begin(7), f.Send(8, "out", {}, b"y", True, "")]


def test_a_commit_made_in_a_delivery_callback_commits_that_callback_s_sends(clock, endpoint):
    """
    A relay sends, acknowledges and commits from its C{on_message} (a
    callback the session fires while it handles a frame): the commit
    comes after the send on the wire and waits for the router, instead
    of finding the send not yet taken into the transaction and ending an
    empty transaction at once (the send then fell into the next one).
    """
    s = transacted(clock, endpoint)
    commits = []

    def relay(message):
        s.client.send("out", b"x")
        message.ack()
        commits.append(s.client.commit())

    subscribed = s.client.subscribe("in", relay, prefetch=1)
    s.router.send(f.Confirm(1, ""))
    result_of(subscribed)
    s.router.send(f.Deliver(1, 1, "m1", "r", {}, b"in", False))
    [committed] = commits
    assert not committed.called
    assert s.router.frames() == [
        f.Subscribe(1, 1, "in", 1),
        f.Begin(2), f.Send(3, "out", {}, b"x", True, ""),
        f.Ack(4, [1]), f.Credit(5, 1, 1), f.Commit(6),
    ]
    s.router.send(f.Confirm(3, "id-3"), f.Confirm(6, ""))
    assert result_of(committed) is None


def test_a_commit_with_nothing_to_commit_is_done_at_once(clock, endpoint):
    s = transacted(clock, endpoint)
    assert result_of(s.client.commit()) is None
    assert result_of(s.client.rollback()) is None
    assert s.router.frames() == []


def test_a_rollback_fails_the_sends_of_the_transaction(clock, endpoint):
    s = transacted(clock, endpoint)
    sent = s.client.send("out", b"x")
    rolled_back = s.client.rollback()
    assert s.router.frames()[-1] == f.Rollback(3)
    s.router.send(f.Error(2, f.ROLLED_BACK, "the client rolled the transaction back"),
                  f.Confirm(3, ""))
    assert isinstance(failure_of(sent), TransactionRolledBack)
    assert result_of(rolled_back) is None


def test_a_refused_commit_raises_transaction_rolled_back(clock, endpoint):
    s = transacted(clock, endpoint)
    sent = s.client.send("out@nowhere", b"x")
    committed = s.client.commit()
    s.router.frames()
    s.router.send(f.Error(2, f.ROLLED_BACK, "rolled back"),
                  f.Error(3, "unknown-router", "no router nowhere"))
    error = failure_of(committed)
    assert isinstance(error, TransactionRolledBack) and error.code == "unknown-router"
    assert isinstance(failure_of(sent), TransactionRolledBack)


def test_commit_on_a_client_that_is_not_transacted_fails(clock, endpoint):
    s = Session(clock, endpoint)
    assert failure_of(s.client.commit()).code == "not-transacted"
    assert isinstance(failure_of(s.client.rollback()), ClientError)


def test_a_reattached_session_replays_an_unanswered_commit(clock, endpoint):
    s = transacted(clock, endpoint, confirmation_window_size=100_000, reconnect_attempts=1)
    sent = s.client.send("out", b"x", duplicate_id="t1:1")
    committed = s.client.commit()
    s.router.frames()
    s.router.lose()
    s.reconnect()
    # The router had received the Begin and the Send only.
    s.router.send(f.Opened(2, SESSION, "router-a", 60000, True, 2))
    assert s.router.frames() == [f.Commit(3)]
    s.router.send(f.Confirm(2, "id-2"), f.Confirm(3, ""))
    assert result_of(sent) == "id-2" and result_of(committed) is None
    assert s.events == [FAILOVER]


def test_a_recreated_session_makes_a_transaction_with_work_rollback_only(clock, endpoint):
    s = transacted(clock, endpoint, reconnect_attempts=1)
    sent = s.client.send("out", b"x")
    s.router.frames()
    s.recreated(OTHER_SESSION)
    assert isinstance(failure_of(sent), TransactionRolledBack)
    assert s.events == [FAILOVER]
    # More work after the failover begins again in the new session, and
    # the commit rolls it all back.
    later = s.client.send("out", b"y")
    committed = s.client.commit()
    assert s.router.frames() == [f.Begin(1), f.Send(2, "out", {}, b"y", True, ""),
                                 f.Rollback(3)]
    s.router.send(f.Error(2, f.ROLLED_BACK, "rolled back"), f.Confirm(3, ""))
    assert isinstance(failure_of(later), TransactionRolledBack)
    error = failure_of(committed)
    assert isinstance(error, TransactionRolledBack) and "session was lost" in error.detail
    # The next transaction commits normally.
    s.client.send("out", b"z")
    committed = s.client.commit()
    assert s.router.frames() == [f.Begin(4), f.Send(5, "out", {}, b"z", True, ""),
                                 f.Commit(6)]
    s.router.send(f.Confirm(5, "id-5"), f.Confirm(6, ""))
    assert result_of(committed) is None


def test_a_rollback_only_transaction_without_new_work_fails_at_once(clock, endpoint):
    s = transacted(clock, endpoint, reconnect_attempts=1)
    sent = s.client.send("out", b"x")
    s.router.frames()
    s.recreated(OTHER_SESSION)
    assert isinstance(failure_of(sent), TransactionRolledBack)
    assert isinstance(failure_of(s.client.commit()), TransactionRolledBack)
    assert s.router.frames() == []


def test_a_commit_in_flight_when_the_session_is_recreated_has_an_unknown_outcome(
        clock, endpoint):
    s = transacted(clock, endpoint, reconnect_attempts=1)
    sent = s.client.send("out", b"x", duplicate_id="t1:1")
    committed = s.client.commit()
    s.router.frames()
    s.recreated(OTHER_SESSION)
    assert isinstance(failure_of(committed), TransactionOutcomeUnknown)
    assert type(failure_of(sent)) is UnblockedError
    # The transaction after it is not affected.
    assert result_of(s.client.commit()) is None


def test_a_commit_waiting_for_the_connection_is_rolled_back_by_a_recreation(clock, endpoint):
    s = transacted(clock, endpoint, reconnect_attempts=1)
    s.router.lose()
    sent = s.client.send("out", b"x")
    committed = s.client.commit()
    s.reconnect()
    s.router.send(f.Opened(2, OTHER_SESSION, "router-a", 60000, False, 0))
    assert isinstance(failure_of(committed), TransactionRolledBack)
    assert isinstance(failure_of(sent), TransactionRolledBack)
    assert s.router.frames() == []


def test_giving_up_during_a_commit_makes_its_outcome_unknown(clock, endpoint):
    s = transacted(clock, endpoint)
    sent = s.client.send("out", b"x")
    committed = s.client.commit()
    s.router.frames()
    s.router.lose()
    assert isinstance(failure_of(committed), TransactionOutcomeUnknown)
    assert type(failure_of(sent)) is UnblockedError
    assert s.events == [DISCONNECT]


def test_acks_not_yet_written_when_the_session_is_recreated_make_it_rollback_only(
        clock, endpoint):
    s = transacted(clock, endpoint, reconnect_attempts=1)
    got = []
    subscribed = s.client.subscribe("in", got.append, prefetch=1)
    s.router.send(f.Confirm(1, ""))
    result_of(subscribed)
    s.router.send(f.Deliver(1, 1, "m1", "r", {}, b"in", False))
    s.router.lose()
    s.reconnect()
    # Acknowledged in the turn the new session arrives: not yet written.
    got[0].ack()
    s.router.send(f.Opened(2, OTHER_SESSION, "router-a", 60000, False, 0))
    assert isinstance(failure_of(s.client.commit()), TransactionRolledBack)


def test_what_a_rolled_back_send_s_errback_does_meets_the_rollback_only_transaction(
        clock, endpoint):
    """
    The application's errback of a send the recreation rolled back runs
    while the client settles the lost session: a rollback() or commit()
    from it must see the transaction already rollback-only (and send no
    Rollback or Commit, which the new session, where nothing began, would
    refuse as a bad-command), and this turn's acknowledgements of the lost
    session's deliveries must not be written into the new one.
    """
    s = transacted(clock, endpoint, reconnect_attempts=1)
    got = []
    subscribed = s.client.subscribe("in", got.append, prefetch=1)
    s.router.send(f.Confirm(1, ""))
    result_of(subscribed)
    s.router.send(f.Deliver(1, 1, "m1", "r", {}, b"in", False))
    sent = s.client.send("out", b"x")
    s.router.lose()
    s.reconnect()
    got[0].ack()
    ended = []

    def failed(failure):
        ended.extend([failure.value, s.client.commit(), s.client.rollback()])

    sent.addErrback(failed)
    s.router.send(f.Opened(2, OTHER_SESSION, "router-a", 60000, False, 0))
    error, committed, rolled_back = ended
    assert isinstance(error, TransactionRolledBack)
    assert isinstance(failure_of(committed), TransactionRolledBack)
    assert result_of(rolled_back) is None
    assert [frame for frame in s.router.frames() if not isinstance(frame, f.Subscribe)] == []
