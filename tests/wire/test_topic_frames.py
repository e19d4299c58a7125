"""
Tests for the frames of topics (L{meshroute.wire.topic_frames}, client
protocol version 8, and L{Unsubscribe}'s C{forget}): they round trip
whatever their fields; the fields that hold their defaults stay off the
wire, so a non-durable subscription and an older client's Unsubscribe
cost nothing more; anything else a peer could send in their place is a
C{WireError}, never another exception.
"""

from dataclasses import astuple

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshroute.errors import WireError
from meshroute.wire import client_frames as f
from meshroute.wire.codec import FrameDecoder, encode
from meshroute.wire.frameset import frame_to_list

FUZZ = settings(max_examples=200, deadline=None)

ints = st.integers(-2**63, 2**63 - 1)
texts = st.text(max_size=40)

#: Any msgpack-able value a peer could put where a field belongs.
anything = st.one_of(ints, texts, st.binary(max_size=5), st.booleans(), st.none(),
                     st.lists(ints, max_size=2))


def decoded(data: bytes) -> list:
    return FrameDecoder(frames=f.FROM_CLIENT).feed(data)


def framed(items: list) -> bytes:
    body = msgpack.packb(items, use_bin_type=True)
    return len(body).to_bytes(4, "big") + body


@FUZZ
@given(ints, ints, texts, ints, texts, texts, st.booleans(), st.booleans())
def test_subscribe_topic_round_trips(command_id, number, pattern, credit, durable, client_id,
                                     shared, mesh_wide):
    frame = f.SubscribeTopic(command_id, number, pattern, credit, durable, client_id, shared,
                             mesh_wide)
    assert decoded(encode(frame)) == [frame]


def test_defaults_stay_off_the_wire():
    assert frame_to_list(f.SubscribeTopic(1, 2, "prices.#", 10)) == [35, 1, 2, "prices.#", 10]
    assert frame_to_list(f.SubscribeTopic(1, 2, "p", 10, "sub", "app")) == [
        35, 1, 2, "p", 10, "sub", "app"]
    assert frame_to_list(f.SubscribeTopic(1, 2, "p", 10, mesh_wide=True)) == [
        35, 1, 2, "p", 10, "", "", False, True]
    # An Unsubscribe that does not forget is the one of versions 1 to 7.
    assert frame_to_list(f.Unsubscribe(3, 2)) == [7, 3, 2]
    assert frame_to_list(f.Unsubscribe(3, 2, forget=True)) == [7, 3, 2, True]


def test_an_unsubscribe_of_any_version_decodes():
    assert decoded(framed([7, 3, 2])) == [f.Unsubscribe(3, 2)]
    assert decoded(framed([7, 3, 2, True])) == [f.Unsubscribe(3, 2, True)]
    assert decoded(framed([35, 1, 2, "p", 10, "d"])) == [f.SubscribeTopic(1, 2, "p", 10, "d")]


@FUZZ
@given(st.lists(anything, max_size=10))
def test_arbitrary_fields_give_a_frame_or_a_wire_error(fields):
    for code in (f.SubscribeTopic.TYPE, f.Unsubscribe.TYPE):
        try:
            (frame,) = decoded(framed([code, *fields]))
        except WireError:
            continue
        assert list(astuple(frame))[:len(fields)] == fields
        assert type(frame.subscription) is int


def test_only_a_router_decodes_it():
    with pytest.raises(WireError, match="unknown"):
        FrameDecoder(frames=f.FROM_ROUTER).feed(encode(f.SubscribeTopic(1, 1, "p", 1)))
