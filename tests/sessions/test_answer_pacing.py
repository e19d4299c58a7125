"""
Tests for when a session's send answers leave
(L{meshroute.sessions.answer_pacing}): the pacing's rules on a
C{task.Clock}, then a native session holding them for a client that
streams and not for one that waits, and their order with the session's
other frames and across a resume.
"""

from dataclasses import dataclass

import pytest
from twisted.internet.task import Clock

from meshroute.errors import MeshrouteError
from meshroute.sessions.answer_pacing import (
    FIRST_PROBE_EVERY,
    GATHERING,
    PROMPT,
    RAREST_PROBE_EVERY,
    AnswerPacing,
)
from meshroute.wire import client_frames as f

from support.router_connection import Connection
from support.served_sessions import make_factory

HOLD_S = 0.002


@dataclass
class Paced:
    clock: Clock
    pacing: AnswerPacing
    written: list


def paced(hold_s: float = HOLD_S) -> Paced:
    clock, written = Clock(), []
    return Paced(clock, AnswerPacing(clock, written.append, hold_s), written)


def answer_at_once(p: Paced, n: int) -> None:
    """
    C{n} answers a client waiting for each: all written at once.
    """
    for i in range(n):
        p.pacing.answer(i)
        assert p.written[-1] == i


def gathering() -> Paced:
    """
    A pacing whose client sent while its probe's answer ("a") was held:
    it gathers from then on.
    """
    p = paced()
    answer_at_once(p, FIRST_PROBE_EVERY - 1)
    p.pacing.answer("a")
    p.clock.advance(HOLD_S / 2)
    p.pacing.send_arrived()
    p.clock.advance(HOLD_S / 2)
    return p


# -- the rules --------------------------------------------------------------------


def test_a_hold_of_zero_writes_every_answer_at_once():
    p = paced(hold_s=0)
    answer_at_once(p, 3 * RAREST_PROBE_EVERY)
    assert p.clock.getDelayedCalls() == []


def test_a_waiting_client_is_probed_and_then_more_and_more_rarely():
    p = paced()
    answer_at_once(p, FIRST_PROBE_EVERY - 1)
    p.pacing.answer("probe")
    assert p.written[-1] != "probe"
    p.clock.advance(HOLD_S - 0.0001)
    assert p.written[-1] != "probe"
    p.clock.advance(0.0001)  # no send meanwhile: it waits
    assert p.written[-1] == "probe"
    assert (p.pacing.mode, p.pacing.probe_every) == (PROMPT, 2 * FIRST_PROBE_EVERY)
    answer_at_once(p, 2 * FIRST_PROBE_EVERY - 1)
    p.pacing.answer("second probe")
    assert p.written[-1] != "second probe"
    p.clock.advance(HOLD_S)
    assert p.pacing.probe_every == 4 * FIRST_PROBE_EVERY
    for _ in range(4 * RAREST_PROBE_EVERY):
        p.pacing.answer("waited for")
        p.clock.advance(HOLD_S)
    assert p.pacing.probe_every == RAREST_PROBE_EVERY


def test_a_client_that_sends_while_an_answer_is_held_gets_its_answers_gathered():
    p = gathering()
    assert (p.written[-1], p.pacing.mode) == ("a", GATHERING)
    before = len(p.written)
    p.pacing.answer("b")
    p.clock.advance(HOLD_S / 2)
    p.pacing.send_arrived()
    p.pacing.answer("c")
    assert len(p.written) == before
    p.clock.advance(HOLD_S / 2)  # the hold is timed from its first answer
    assert p.written[before:] == ["b", "c"]
    assert p.pacing.mode == GATHERING


def test_a_gathering_hold_without_a_send_goes_back_to_prompt():
    p = gathering()
    p.pacing.answer("b")
    p.clock.advance(HOLD_S)  # the client waited for b
    assert (p.written[-1], p.pacing.mode) == ("b", PROMPT)
    # It had streamed just before: probed again soon.
    assert p.pacing.probe_every == 2 * FIRST_PROBE_EVERY
    answer_at_once(p, 2 * FIRST_PROBE_EVERY - 1)


def test_sends_in_the_first_half_of_a_hold_are_a_burst_not_a_stream():
    """
    A client keeping a few sends in flight sends the rest just after the
    held one (or in the same read), then waits: answered at once.
    """
    p = paced()
    answer_at_once(p, FIRST_PROBE_EVERY - 1)
    p.pacing.answer("probe")
    for _ in range(3):
        p.pacing.send_arrived()
        p.clock.advance(HOLD_S / 8)
    p.clock.advance(HOLD_S)
    assert (p.written[-1], p.pacing.mode) == ("probe", PROMPT)


def test_a_send_arriving_with_nothing_held_teaches_nothing():
    p = paced()
    p.pacing.send_arrived()
    answer_at_once(p, FIRST_PROBE_EVERY - 1)
    p.pacing.answer("probe")
    p.clock.advance(HOLD_S)
    assert p.pacing.mode == PROMPT


def test_release_writes_what_is_held_in_order_and_keeps_the_mode():
    p = gathering()
    p.pacing.answer("b")
    p.pacing.answer("c")
    p.pacing.release()
    assert p.written[-2:] == ["b", "c"]
    assert p.clock.getDelayedCalls() == []
    assert p.pacing.mode == GATHERING
    p.pacing.release()  # nothing held: nothing written
    assert p.written[-2:] == ["b", "c"]


def test_drop_forgets_what_is_held():
    p = paced()
    answer_at_once(p, FIRST_PROBE_EVERY - 1)
    p.pacing.answer("lost")
    p.pacing.drop()
    p.clock.advance(1)
    assert "lost" not in p.written
    p.pacing.answer("next")


# -- a native session ---------------------------------------------------------------


@pytest.fixture
def held_factory(engine, clock):
    return make_factory(engine, clock, send_answer_hold_ms=2)


def send(connection, engine, n: int) -> None:
    connection.send(f.Send(n, "q", {}, b"x", False))
    engine.submitted[n - 1].deferred.callback(f"id-{n}")


def test_a_client_that_waits_for_each_confirm_gets_it_at_once_but_for_a_probe(
        held_factory, engine, clock):
    connection = Connection(held_factory)
    connection.open()
    for n in range(1, FIRST_PROBE_EVERY):
        send(connection, engine, n)
        assert connection.received() == [f.Confirm(n, f"id-{n}")]
    send(connection, engine, FIRST_PROBE_EVERY)
    assert connection.received() == []
    clock.advance(0.002)
    assert connection.received() == [f.Confirm(FIRST_PROBE_EVERY, f"id-{FIRST_PROBE_EVERY}")]
    send(connection, engine, FIRST_PROBE_EVERY + 1)
    assert connection.received() == [
        f.Confirm(FIRST_PROBE_EVERY + 1, f"id-{FIRST_PROBE_EVERY + 1}")]


def test_a_clients_sends_in_one_read_do_not_make_it_stream(held_factory, engine, clock):
    connection = Connection(held_factory)
    connection.open()
    for n in range(1, FIRST_PROBE_EVERY):
        send(connection, engine, n)
    connection.received()
    burst = range(FIRST_PROBE_EVERY, FIRST_PROBE_EVERY + 4)
    connection.send(*(f.Send(n, "q", {}, b"x", False) for n in burst))
    for n in burst:
        engine.submitted[n - 1].deferred.callback(f"id-{n}")
    assert connection.received() == []  # the probe, and what follows it
    clock.advance(0.002)
    assert connection.received() == [f.Confirm(n, f"id-{n}") for n in burst]
    send(connection, engine, FIRST_PROBE_EVERY + 4)
    assert connection.received() == [
        f.Confirm(FIRST_PROBE_EVERY + 4, f"id-{FIRST_PROBE_EVERY + 4}")]


def streaming(held_factory, engine, clock) -> Connection:
    """
    A connection whose client sent in the second half of its probe
    answer's hold: its answers are gathered from now on.
    """
    connection = Connection(held_factory)
    connection.open()
    for n in range(1, FIRST_PROBE_EVERY + 1):
        send(connection, engine, n)
    clock.advance(0.001)
    connection.send(f.Send(FIRST_PROBE_EVERY + 1, "q", {}, b"x", False))
    clock.advance(0.001)
    connection.received()
    assert held_factory.sessions.describe()[0]["state"] == "open"
    return connection


def test_a_streaming_clients_confirms_leave_together_after_the_hold(held_factory, engine, clock):
    connection = streaming(held_factory, engine, clock)
    n = FIRST_PROBE_EVERY + 1
    engine.submitted[n - 1].deferred.callback(f"id-{n}")
    send(connection, engine, n + 1)
    assert connection.received() == []
    clock.advance(0.002)
    assert connection.received() == [f.Confirm(n, f"id-{n}"), f.Confirm(n + 1, f"id-{n + 1}")]


def test_held_confirms_go_before_the_sessions_next_frame(held_factory, engine, clock):
    connection = streaming(held_factory, engine, clock)
    n = FIRST_PROBE_EVERY + 1
    engine.submitted[n - 1].deferred.callback(f"id-{n}")
    connection.send(f.Send(n + 1, "q", {}, b"x", False))
    error = MeshrouteError("full")
    error.code = "backlog-full"
    engine.submitted[n].deferred.errback(error)
    assert connection.received() == [f.Confirm(n, f"id-{n}"),
                                     f.Error(n + 1, "backlog-full", "full")]


def test_a_confirm_made_while_disconnected_is_resent_once_after_opened(
        held_factory, engine, clock):
    connection = streaming(held_factory, engine, clock)
    opened_id = held_factory.sessions.describe()[0]["session_id"]
    n = FIRST_PROBE_EVERY + 1
    connection.lose()
    engine.submitted[n - 1].deferred.callback(f"id-{n}")
    again = Connection(held_factory)
    again.open(opened_id, answered_up_to=n - 1)  # within what would be a hold
    assert again.after_open == [f.Confirm(n, f"id-{n}")]
    clock.advance(0.002)
    assert again.received() == []


def test_confirms_held_when_the_connection_is_lost_are_resent_on_resume(
        held_factory, engine, clock):
    connection = streaming(held_factory, engine, clock)
    opened_id = held_factory.sessions.describe()[0]["session_id"]
    n = FIRST_PROBE_EVERY + 1
    engine.submitted[n - 1].deferred.callback(f"id-{n}")
    connection.lose()
    clock.advance(0.002)
    again = Connection(held_factory)
    again.open(opened_id, answered_up_to=n - 1)
    assert again.after_open == [f.Confirm(n, f"id-{n}")]
    clock.advance(0.002)
    assert again.received() == []
