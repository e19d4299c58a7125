"""
Tests for the frames of two-phase commit (L{meshroute.wire.two_phase_frames},
client protocol version 7): valid xids round trip, whatever their
characters; anything else a peer could send in their place is a
C{WireError} (a protocol error), never another exception.
"""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshroute.errors import WireError
from meshroute.wire import client_frames as f
from meshroute.wire.codec import FrameDecoder, encode
from meshroute.wire.two_phase_frames import MAX_FORMAT_ID, MAX_XID_PART, xid_problem

FUZZ = settings(max_examples=200, deadline=None)

format_ids = st.integers(0, MAX_FORMAT_ID)
global_ids = st.text(min_size=1, max_size=MAX_XID_PART)
branches = st.text(max_size=MAX_XID_PART)
xids = st.tuples(format_ids, global_ids, branches)
command_ids = st.integers(1, 2**63 - 1)

#: Any msgpack-able value a peer could put where a field belongs.
anything = st.one_of(st.integers(-2**63, 2**63 - 1), st.text(max_size=70),
                     st.binary(max_size=5), st.booleans(), st.none(),
                     st.lists(st.integers(-2**63, 2**63 - 1), max_size=3))


def decoded(frame, frames=None):
    frames = frames or (f.FROM_ROUTER if isinstance(frame, f.Recovered) else f.FROM_CLIENT)
    return FrameDecoder(frames=frames).feed(encode(frame))


@FUZZ
@given(command_ids, xids, st.booleans())
def test_frames_of_valid_xids_round_trip(command_id, xid, one_phase):
    for frame in (f.Prepare(command_id, *xid), f.CommitXid(command_id, *xid, one_phase),
                  f.RollbackXid(command_id, *xid)):
        assert decoded(frame) == [frame]
        assert frame.xid == xid
    recovered = f.Recovered(command_id, [list(xid), list(xid)])
    assert decoded(recovered) == [recovered]


@FUZZ
@given(anything, anything, anything)
def test_an_xid_is_valid_exactly_when_xid_problem_says_so(format_id, global_id, branch):
    problem = xid_problem(format_id, global_id, branch)
    valid = (type(format_id) is int and 0 <= format_id <= MAX_FORMAT_ID
             and type(global_id) is str and 1 <= len(global_id) <= MAX_XID_PART
             and type(branch) is str and len(branch) <= MAX_XID_PART)
    assert (problem is None) == valid


def _encoded_list(items: list) -> bytes:
    import msgpack

    body = msgpack.packb(items, use_bin_type=True)
    return len(body).to_bytes(4, "big") + body


@FUZZ
@given(st.sampled_from([f.Prepare, f.RollbackXid, f.CommitXid]), anything, anything, anything,
       anything, anything)
def test_arbitrary_fields_give_a_frame_or_a_wire_error(cls, command_id, format_id, global_id,
                                                       branch, one_phase):
    items = [cls.TYPE, command_id, format_id, global_id, branch]
    if cls is f.CommitXid:
        items.append(one_phase)
    try:
        (frame,) = FrameDecoder(frames=f.FROM_CLIENT).feed(_encoded_list(items))
    except WireError:
        return
    assert xid_problem(*frame.xid) is None


@FUZZ
@given(st.lists(st.one_of(st.lists(anything, max_size=4), anything), max_size=4))
def test_arbitrary_recovered_xids_give_a_frame_or_a_wire_error(items):
    try:
        (frame,) = FrameDecoder(frames=f.FROM_ROUTER).feed(
            _encoded_list([f.Recovered.TYPE, 1, items]))
    except WireError:
        return
    assert all(xid_problem(*xid) is None for xid in frame.xids)


def test_a_frame_cannot_be_made_with_an_invalid_xid():
    with pytest.raises(WireError, match="Prepare: format_id"):
        f.Prepare(1, -1, "g", "")
    with pytest.raises(WireError, match="global_transaction_id"):
        f.CommitXid(1, 0, "", "", True)
    with pytest.raises(WireError, match="branch_qualifier"):
        f.RollbackXid(1, 0, "g", "b" * (MAX_XID_PART + 1))
    with pytest.raises(WireError):
        f.Recovered(1, [[0, "g"]])


def test_version_7_frames_go_one_way_each():
    assert {f.Prepare, f.CommitXid, f.RollbackXid, f.Recover} <= set(f.FROM_CLIENT.classes)
    assert f.Recovered in f.FROM_ROUTER.classes
    with pytest.raises(WireError):
        FrameDecoder(frames=f.FROM_ROUTER).feed(encode(f.Recover(1)))
