"""
Tests for L{meshroute.wire}: the frame types and the sans-IO codec.

Every frame type survives L{encode} → L{FrameDecoder} however the bytes
are chunked; anything a peer can send either decodes to well-typed frames
or raises L{WireError} (never another exception); and the length limits
refuse a frame from its 4-byte prefix alone, before any body is buffered.
"""

import struct

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshroute.errors import WireError
from meshroute.store.changes import ChangeBatch
from meshroute.wire.codec import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, encode
from meshroute.wire.frames import (
    BATCH_MAX_MESSAGES,
    CHALLENGE_SIZE,
    LINK_FRAMES,
    MAX_SNAPSHOT_CHUNK,
    Ack,
    Applied,
    Authenticate,
    Authenticated,
    Changes,
    FastTransfer,
    FastTransferBatch,
    Follow,
    Heartbeat,
    HeartbeatAnswer,
    Hello,
    InSync,
    Interest,
    Keepalive,
    Recovery,
    Reject,
    ReplicaHello,
    Routes,
    SnapshotChunk,
    SnapshotEnd,
    StartAnswer,
    StartQuery,
    Transfer,
    TransferBatch,
    VoteAnswer,
    VoteHello,
    VoteRequest,
    Welcome,
)
from meshroute.wire.frameset import frame_to_list

FRAME_TYPES = LINK_FRAMES.types

FUZZ = settings(max_examples=300, deadline=None)

#: One instance of every frame type.
SAMPLES = [
    Hello([1], "router-a"),
    Welcome(1, "router-b", 1000, b"\x01" * CHALLENGE_SIZE),
    Reject("name-in-use", "router-a is already connected"),
    Authenticate(b"\x02" * 32, b"\x03" * CHALLENGE_SIZE),
    Authenticated(b"\x04" * 32),
    Recovery(17),
    Keepalive(),
    Transfer(3, "router-a:ab:1", "router-a", "router-c", "orders", 1, 1795306854.25,
             {"k": "v"}, b"body"),
    Ack(3),
    FastTransfer("router-a:ab:2", "router-a", "router-c", "orders", 0, 0.0, {}, b""),
    Routes([["router-a", 7, ["router-b", "router-c"]], ["router-b", 1, []]]),
    Interest([["router-a", 1732883400000, ["prices.#", "orders.*.eu"]], ["router-b", 3, []]]),
    VoteHello([3], "router-b"),
    VoteRequest("router-b", "router-b/backup", "router-b/backup", 4, 3, 1200, True, 3000),
    VoteAnswer("router-b", "router-a", 4, False, "stale-epoch", 5),
    Heartbeat("router-b", "router-b/primary", 3, 3, 1200, 3, 1180, 17.5, 3000),
    HeartbeatAnswer("router-b", "router-a", True, 17.5, 3),
    StartQuery("router-b"),
    StartAnswer("router-b", "router-b/backup", "router-b/primary", 4, "router-b/primary", 3,
                1200, 4, 0, [4, 1210]),
    ReplicaHello([3], "router-b"),
    Follow("0f3e", 3, 1200),
    SnapshotChunk(b"SQLite format 3\x00"),
    SnapshotEnd(4, 1210),
    Changes([[4, 1211, [["INSERT INTO t VALUES (?1, ?2)", [1, b"x"], False],
                        ["DELETE FROM u WHERE k = ?1", [["a"], ["b"]], True]]]], 1214),
    Applied(1211),
    InSync(1214),
    TransferBatch(4, [["router-a:ab:3", "router-a", "router-c", "orders", 1, 1795306854.5,
                       {"k": "v"}, b"one"],
                      ["router-a:ab:4", "router-a", "router-c", "orders", 2, 1795306855.0,
                       {}, b""]]),
    FastTransferBatch([["router-a:ab:5", "router-a", "router-c", "orders", 0, 0.0, {}, b"x"]]),
]


def prefixed(body: bytes) -> bytes:
    """
    C{body} behind a correct 4-byte big-endian length prefix.
    """
    return struct.pack(">I", len(body)) + body


def raw(items) -> bytes:
    """
    The wire bytes of an arbitrary msgpack value, correctly length-prefixed,
    so that only the body's content can be wrong.
    """
    return prefixed(msgpack.packb(items, use_bin_type=True))


def feed_bytewise(decoder: FrameDecoder, data: bytes) -> list:
    frames = []
    for i in range(len(data)):
        frames.extend(decoder.feed(data[i : i + 1]))
    return frames


# -- round trips --------------------------------------------------------------


def test_samples_cover_every_frame_type():
    assert {type(f) for f in SAMPLES} == set(FRAME_TYPES.values())
    assert sorted(FRAME_TYPES) == list(range(1, 29))


@pytest.mark.parametrize("items, why", [
    ([13, "router b", "i", "i", 1, 0, 0, False, 3000], "group"),
    ([13, "g", "", "i", 1, 0, 0, False, 3000], "candidate"),
    ([13, "g", "i", "i" * 129, 1, 0, 0, False, 3000], "requester"),
    ([13, "g", "i", "i", -1, 0, 0, False, 3000], "epoch"),
    ([13, "g", "i", "i", 2**63, 0, 0, False, 3000], "epoch"),
    ([13, "g", "i", "i", 1, 0, 0, False, 0], "lease_timeout_ms"),
    ([15, "g", "i", 1, 0, 0, 0, -5, 1.0, 3000], "confirmed_position"),
    ([12, ["3"], "router-b"], "versions"),
    ([17, "router b"], "group"),
    ([18, "g", "v", "", 1, "", 0, 0, 0, 0, [1]], "own_position"),
    ([18, "g", "v", "", 1, "", 0, 0, 0, 0, [1, -1]], "own_position"),
    ([18, "g", "v", "", 1, "", 0, 0, 0, 0, [1, "2"]], "own_position"),
], ids=lambda v: v if isinstance(v, str) else str(v[0]))
def test_vote_frames_refuse_what_a_voter_cannot_store(items, why):
    """
    The checks run on decode: a peer's bad vote frame is a WireError (a
    protocol error), never a value the store would choke on.
    """
    with pytest.raises(WireError, match=why):
        FrameDecoder().feed(raw(items))


GOOD_STATEMENT = ["INSERT INTO t VALUES (?1)", [1], False]


@pytest.mark.parametrize("items, why", [
    ([19, ["3"], "router-b"], "versions"),
    ([20, "s", -1, 0], "epoch"),
    ([20, "s", 0, 2**63], "position"),
    ([21, b""], "data"),
    ([21, b"x" * (MAX_SNAPSHOT_CHUNK + 1)], "data"),
    ([22, 1, -1], "position"),
    ([23, [], -1], "head"),
    ([23, [[1, 2]], 3], "batches"),
    ([23, [[1, -2, [GOOD_STATEMENT]]], 3], "batches"),
    ([23, [[1, 0, [GOOD_STATEMENT]]], 3], "batches"),  # positions count from 1
    ([23, [[1, 2, GOOD_STATEMENT]], 3], "batches"),
    ([23, [[1, 2, [["sql", [1]]]]], 3], "batches"),  # no many flag
    ([23, [[1, 2, [["sql", [[1]], False]]]], 3], "batches"),  # a list as a value
    ([23, [[1, 2, [["sql", [1], True]]]], 3], "batches"),  # many without rows
    ([23, [[1, 2, [["sql", [{"a": 1}], False]]]], 3], "batches"),
    ([23, [[1, 2, [["sql", {"a": [1]}, False]]]], 3], "batches"),
    ([23, [[1, 2, [["sql", {b"a": 1}, False]]]], 3], "batches"),  # a name not text
    ([23, [[1, 2, [["sql", [[1], [2], [[3]]], True]]]], 3], "batches"),  # one bad row of many
    ([23, [[1, 2, [["sql", [], True]]]], 3], "batches"),  # executemany of nothing
    ([23, [[1, 2, [[b"sql", [1], False]]]], 3], "batches"),
    ([24, -1], "position"),
    ([25, 2**63], "position"),
], ids=lambda v: v if isinstance(v, str) else str(v[0]))
def test_replication_frames_refuse_what_a_replica_cannot_apply(items, why):
    """
    A follower applies what it decodes: every statement is SQL text with
    SQL values (one row, or rows for executemany), every number fits
    SQLite, a snapshot chunk is bounded.
    """
    with pytest.raises(WireError, match=why):
        FrameDecoder().feed(raw(items))


def test_a_changes_frame_may_carry_no_batches():
    """
    An empty Changes tells a follower the active's head (it may be in
    sync already).
    """
    assert FrameDecoder().feed(encode(Changes([], 7))) == [Changes([], 7)]


@pytest.mark.parametrize("frame", SAMPLES, ids=lambda f: type(f).__name__)
def test_round_trip_whole(frame):
    decoder = FrameDecoder()
    assert decoder.feed(encode(frame)) == [frame]
    assert decoder.pending == 0


@pytest.mark.parametrize("frame", SAMPLES, ids=lambda f: type(f).__name__)
def test_round_trip_byte_at_a_time(frame):
    data = encode(frame)
    decoder = FrameDecoder()
    results = [decoder.feed(data[i : i + 1]) for i in range(len(data))]
    # Nothing comes out until the last byte, which completes exactly one frame.
    assert results[:-1] == [[]] * (len(data) - 1)
    assert results[-1] == [frame]
    assert decoder.pending == 0


def test_encoding_layout():
    """
    The prefix is the big-endian body length; the body is the msgpack array
    [TYPE, *fields].
    """
    data = encode(Recovery(5))
    assert data == b"\x00\x00\x00\x05" + b"\x94\x06\x05\xa0\xa0"
    assert encode(Keepalive()) == b"\x00\x00\x00\x02\x91\x07"
    assert frame_to_list(Welcome(1, "b", 2, b"c")) == [2, 1, "b", 2, b"c"]


def test_several_frames_in_one_chunk():
    decoder = FrameDecoder()
    data = b"".join(encode(f) for f in SAMPLES)
    assert decoder.feed(data) == SAMPLES
    assert decoder.pending == 0


def test_several_frames_and_a_partial_one_in_one_chunk():
    decoder = FrameDecoder()
    tail = encode(Recovery(99))
    data = b"".join(encode(f) for f in SAMPLES) + tail[:3]
    assert decoder.feed(data) == SAMPLES
    assert decoder.pending == 3
    assert decoder.feed(tail[3:]) == [Recovery(99)]
    assert decoder.pending == 0


def test_several_frames_byte_at_a_time():
    decoder = FrameDecoder()
    data = b"".join(encode(f) for f in SAMPLES)
    assert feed_bytewise(decoder, data) == SAMPLES
    assert decoder.pending == 0


def test_extreme_integers_round_trip():
    frames = [Recovery(0), Recovery(2**64 - 1), Recovery(-(2**63)), Hello([], ""),
              Hello([-1, 2**64 - 1], "x" * 1000)]
    decoder = FrameDecoder()
    assert decoder.feed(b"".join(encode(f) for f in frames)) == frames


# -- pending --------------------------------------------------------------------


def test_pending_reports_a_partial_frame():
    data = encode(Reject("auth-failed", "secrets differ"))
    decoder = FrameDecoder()
    assert decoder.pending == 0
    assert decoder.feed(data[:2]) == []
    assert decoder.pending == 2
    assert decoder.feed(data[2:4]) == []
    assert decoder.pending == 4
    assert decoder.feed(data[4:-1]) == []
    assert decoder.pending == len(data) - 1
    assert decoder.feed(data[-1:]) == [Reject("auth-failed", "secrets differ")]
    assert decoder.pending == 0


def test_feeding_nothing_is_harmless():
    decoder = FrameDecoder()
    assert decoder.feed(b"") == []
    assert decoder.pending == 0


# -- length limits --------------------------------------------------------------


def test_zero_length_refused_from_prefix_alone():
    decoder = FrameDecoder()
    with pytest.raises(WireError, match="frame length 0 outside"):
        decoder.feed(struct.pack(">I", 0))


@pytest.mark.parametrize("size", [DEFAULT_MAX_FRAME_SIZE + 1, 2**32 - 1])
def test_oversized_length_refused_from_prefix_alone(size):
    decoder = FrameDecoder()
    with pytest.raises(WireError, match=f"frame length {size} outside 1..{DEFAULT_MAX_FRAME_SIZE}"):
        decoder.feed(struct.pack(">I", size))


def test_oversized_length_refused_when_prefix_arrives_bytewise():
    decoder = FrameDecoder()
    prefix = struct.pack(">I", DEFAULT_MAX_FRAME_SIZE + 1)
    for byte in prefix[:3]:
        assert decoder.feed(bytes([byte])) == []
    with pytest.raises(WireError):
        decoder.feed(prefix[3:])


def test_maximum_length_waits_for_body():
    decoder = FrameDecoder()
    assert decoder.feed(struct.pack(">I", DEFAULT_MAX_FRAME_SIZE)) == []
    assert decoder.pending == 4


def test_oversized_length_after_a_good_frame_in_the_same_chunk():
    decoder = FrameDecoder(max_frame_size=64)
    with pytest.raises(WireError):
        decoder.feed(encode(Keepalive()) + struct.pack(">I", 65))


def _reject_with_body_size(size: int) -> Reject:
    for n in range(size):
        frame = Reject("c", "x" * n)
        if len(encode(frame)) - 4 == size:
            return frame
    raise AssertionError(f"no Reject with a {size}-byte body")


def test_small_max_frame_size_is_honoured():
    limit = 16
    fits = _reject_with_body_size(limit)
    too_big = _reject_with_body_size(limit + 1)

    decoder = FrameDecoder(max_frame_size=limit)
    assert decoder.feed(encode(fits)) == [fits]

    decoder = FrameDecoder(max_frame_size=limit)
    with pytest.raises(WireError, match="frame length 17 outside 1..16"):
        decoder.feed(encode(too_big)[:4])


# -- ill-formed bodies --------------------------------------------------------


@pytest.mark.parametrize(
    "items",
    [
        [2, True, "router-b", 1000, b"c" * 32],  # bool as Welcome.version
        [2, 1, "router-b", False, b"c" * 32],  # bool as keepalive interval
        [6, True, "s", ""],  # bool as Recovery.last_received
        [6, 1.0, "s", ""],  # float as int
        [6, None, "s", ""],
        [6, "1", "s", ""],
        [6, 1, b"s", ""],  # bytes as Recovery.store_id
        [6, 1, "s", None],
        [1, [1, True], "router-a"],  # bool inside Hello.versions
        [1, ["1"], "router-a"],
        [1, (1,), 7],  # int as Hello.router
        [1, 1, "router-a"],  # int as Hello.versions
        [2, 1, "router-b", 1000, "c" * 32],  # str as Welcome.challenge
        [4, "proof", b"c" * 32],  # str as Authenticate.proof
        [5, "proof"],  # str as Authenticated.proof
        [3, b"name-in-use", "detail"],  # bytes as Reject.code
        [3, "name-in-use", None],
    ],
    ids=repr,
)
def test_wrong_field_types(items):
    with pytest.raises(WireError):
        FrameDecoder().feed(raw(items))


@pytest.mark.parametrize(
    "items",
    [
        [1, [1]],  # Hello without router
        [1, [1], "a", 3, "b"],  # Hello with more than its optional epoch
        [2, 1, "router-b", 1000],
        [3, "code"],
        [4, b"p"],
        [5],
        [5, b"p", b"q"],
        [6],
        [6, 1],  # a version-1 Recovery
        [6, 1, "s", "p", 2],
        [7, 0],  # Keepalive has no fields
    ],
    ids=repr,
)
def test_wrong_field_counts(items):
    with pytest.raises(WireError, match=r"frame has \d+ fields, expected \d+"):
        FrameDecoder().feed(raw(items))


@pytest.mark.parametrize("code", [0, 29, 99, -1, 2**40, True, False, 1.0, "1", b"\x01", None, [1]],
                         ids=repr)
def test_unknown_type_codes(code):
    with pytest.raises(WireError, match="unknown link frame type"):
        FrameDecoder().feed(raw([code]))


@pytest.mark.parametrize("value", [[], 7, "hello", b"\x07", None, True, 1.5], ids=repr)
def test_non_list_bodies(value):
    with pytest.raises(WireError, match="not a non-empty array"):
        FrameDecoder().feed(raw(value))


@pytest.mark.parametrize("value", [{}, {"type": 7}, {"0": 6, "1": 5}], ids=repr)
def test_maps_are_not_frames(value):
    with pytest.raises(WireError, match="not a non-empty array"):
        FrameDecoder().feed(raw(value))


def test_map_with_non_string_keys():
    with pytest.raises(WireError):
        FrameDecoder().feed(raw({0: 6, 1: 5}))


def test_map_inside_a_frame():
    with pytest.raises(WireError, match="Recovery.last_received is dict"):
        FrameDecoder().feed(raw([6, {"a": 1}, "s", ""]))


@pytest.mark.parametrize(
    "body",
    [
        b"\xc1",  # never-used msgpack byte
        b"\x92\x06",  # array of 2 with one element: truncated
        b"\x91\x07\x07",  # one array and extra data
        b"\xa2\xff\xfe",  # str that is not UTF-8
        b"\xdd\xff\xff\xff\xff",  # array claiming 2**32-1 elements
        b"\x91" * 2000 + b"\x07",  # nesting too deep
    ],
    ids=["reserved", "truncated", "extra", "bad-utf8", "huge-array", "deep"],
)
def test_undecodable_bodies(body):
    with pytest.raises(WireError):
        FrameDecoder().feed(prefixed(body))


def test_challenge_is_not_checked_by_the_codec():
    """
    Challenge sizes are the handshake's business (it knows the stage), not
    the codec's: any bytes decode.
    """
    frame = Welcome(1, "b", 1, b"short")
    assert FrameDecoder().feed(encode(frame)) == [frame]


# -- fuzzing ------------------------------------------------------------------

ints = st.integers(min_value=-(2**63), max_value=2**64 - 1)
positions = st.integers(min_value=0, max_value=2**63 - 1)

batch_messages = st.lists(
    st.tuples(st.text(max_size=30), st.text(max_size=20), st.text(max_size=20),
              st.text(max_size=20), ints, st.floats(allow_nan=False),
              st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3),
              st.binary(max_size=100)).map(list),
    min_size=1, max_size=5)

frames = st.one_of(
    st.builds(Hello, st.lists(ints, max_size=5), st.text(max_size=70)),
    st.builds(Welcome, ints, st.text(max_size=70), ints, st.binary(max_size=40)),
    st.builds(Reject, st.text(max_size=20), st.text(max_size=200)),
    st.builds(Authenticate, st.binary(max_size=40), st.binary(max_size=40)),
    st.builds(Authenticated, st.binary(max_size=40)),
    st.builds(Recovery, ints),
    st.just(Keepalive()),
    st.builds(Transfer, ints, st.text(max_size=30), st.text(max_size=20), st.text(max_size=20),
              st.text(max_size=20), ints, st.floats(allow_nan=False),
              st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3),
              st.binary(max_size=100)),
    st.builds(Ack, ints),
    st.builds(FastTransfer, st.text(max_size=30), st.text(max_size=20), st.text(max_size=20),
              st.text(max_size=20), ints, st.floats(allow_nan=False),
              st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3),
              st.binary(max_size=100)),
    st.builds(Routes, st.lists(st.tuples(st.text(max_size=10), ints,
                                         st.lists(st.text(max_size=10), max_size=4))
                               .map(lambda t: [t[0], t[1], t[2]]), max_size=4)),
    st.builds(StartQuery, st.from_regex(r"[a-z.-]{1,64}", fullmatch=True)),
    st.builds(ReplicaHello, st.lists(ints, max_size=5), st.text(max_size=70)),
    st.builds(Follow, st.text(max_size=40), positions, positions),
    st.builds(SnapshotChunk, st.binary(min_size=1, max_size=300)),
    st.builds(SnapshotEnd, positions, positions),
    st.builds(Applied, positions),
    st.builds(InSync, positions),
    st.builds(TransferBatch, st.integers(min_value=1, max_value=2**62), batch_messages),
    st.builds(FastTransferBatch, batch_messages),
)

sql_values = st.none() | ints.filter(lambda n: n < 2**63) | st.floats() | st.text(max_size=10) \
    | st.binary(max_size=10)
rows = st.lists(sql_values | st.booleans(), max_size=4) \
    | st.dictionaries(st.text(max_size=5), sql_values, max_size=3)
statements = st.one_of(
    st.tuples(st.text(max_size=30), rows).map(lambda t: [t[0], t[1], False]),
    st.tuples(st.text(max_size=30), st.lists(rows, min_size=1, max_size=3))
    .map(lambda t: [t[0], t[1], True]),
)
batches = st.lists(st.tuples(positions, positions.filter(bool), st.lists(statements, max_size=4))
                   .map(list), max_size=4)


@FUZZ
@given(batches, positions, st.lists(st.integers(min_value=0), max_size=10))
def test_any_changes_round_trip_however_chunked(sent, head, cuts):
    """
    Every batch list a store can record survives the wire exactly (NaN
    compared as bytes: it is not equal to itself).
    """
    frame = Changes(sent, head)
    data = encode(frame)
    for batch in sent:  # what the follower makes of it
        plain = ChangeBatch.from_plain(batch).to_plain()
        assert msgpack.packb(plain, use_bin_type=True) == msgpack.packb(batch, use_bin_type=True)
    decoder = FrameDecoder()
    received = []
    for chunk in split(data, cuts):
        received.extend(decoder.feed(chunk))
    assert [encode(f) for f in received] == [data]


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    """
    C{data} cut at the given positions (taken modulo its length).
    """
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:])]


def feed_chunks(decoder: FrameDecoder, chunks: list[bytes]) -> list:
    """
    Feed C{chunks} until the end or the first L{WireError}; any other
    exception fails the test.
    """
    out = []
    for chunk in chunks:
        try:
            result = decoder.feed(chunk)
        except WireError:
            return out
        assert isinstance(result, list)
        for frame in result:
            assert type(frame) in FRAME_TYPES.values()
        out.extend(result)
    return out


@FUZZ
@given(st.lists(frames, max_size=8), st.lists(st.integers(min_value=0), max_size=20))
def test_valid_streams_survive_any_chunking(sent, cuts):
    data = b"".join(encode(f) for f in sent)
    decoder = FrameDecoder()
    received = []
    for chunk in split(data, cuts):
        received.extend(decoder.feed(chunk))
    assert received == sent
    assert decoder.pending == 0


@pytest.mark.timeout(120)
@FUZZ
@given(st.binary(max_size=2000), st.lists(st.integers(min_value=0), max_size=10))
def test_arbitrary_bytes_give_frames_or_wire_error(data, cuts):
    feed_chunks(FrameDecoder(), split(data, cuts))


@pytest.mark.timeout(120)
@FUZZ
@given(st.binary(min_size=1, max_size=500))
def test_arbitrary_bodies_give_frames_or_wire_error(body):
    """
    Garbage behind a correct prefix reaches the msgpack and schema checks.
    """
    try:
        result = FrameDecoder().feed(prefixed(body))
    except WireError:
        return
    assert len(result) == 1
    assert type(result[0]) in FRAME_TYPES.values()


@pytest.mark.timeout(120)
@FUZZ
@given(
    st.lists(
        st.one_of(
            frames.map(encode),
            st.binary(max_size=50),
            st.binary(min_size=1, max_size=50).map(prefixed),
        ),
        max_size=10,
    ),
    st.lists(st.integers(min_value=0), max_size=20),
    st.sampled_from([16, 64, DEFAULT_MAX_FRAME_SIZE]),
)
def test_frames_mixed_with_garbage_give_frames_or_wire_error(pieces, cuts, limit):
    feed_chunks(FrameDecoder(max_frame_size=limit), split(b"".join(pieces), cuts))


@pytest.mark.timeout(120)
@FUZZ
@given(
    st.recursive(
        st.none() | st.booleans() | st.floats() | ints | st.text(max_size=10)
        | st.binary(max_size=10),
        lambda inner: st.lists(inner, max_size=5)
        | st.dictionaries(st.text(max_size=5), inner, max_size=3),
        max_leaves=20,
    ).map(lambda tail: [tail] if not isinstance(tail, list) else tail),
    st.sampled_from(sorted(FRAME_TYPES)),
)
def test_well_formed_msgpack_with_a_known_type_code(tail, code):
    """
    Arbitrary msgpack values after a valid type code: a frame whose fields
    all have the annotated types, or WireError.
    """
    try:
        result = FrameDecoder().feed(raw([code, *tail]))
    except WireError:
        return
    assert len(result) == 1
    frame = result[0]
    assert type(frame) is FRAME_TYPES[code]
    assert frame_to_list(frame) == [code, *tail]


def test_a_vote_frame_cannot_claim_a_lease_longer_than_an_hour():
    """
    A witness keeps the longest lease it was told: a frame may not make
    one longer than the timers' maximum.
    """
    from meshroute.errors import WireError
    from meshroute.wire.frames import MAX_LEASE_TIMEOUT_MS, VoteRequest

    VoteRequest("g", "b", "b", 1, 0, 0, False, MAX_LEASE_TIMEOUT_MS)
    with pytest.raises(WireError, match="lease_timeout_ms"):
        VoteRequest("g", "b", "b", 1, 0, 0, False, MAX_LEASE_TIMEOUT_MS + 1)


# -- epochs (version 3): optional on the wire, so a router without HA sends
# -- exactly what version 2 sends --------------------------------------------


def test_hello_without_an_epoch_is_version_2_s_hello():
    assert encode(Hello([2, 3], "router-a")) == raw([1, [2, 3], "router-a"])
    assert FrameDecoder().feed(raw([1, [2], "router-a"])) == [Hello([2], "router-a", 0)]


def test_hello_carries_a_nonzero_epoch():
    frame = Hello([2, 3], "router-b", 7)
    assert encode(frame) == raw([1, [2, 3], "router-b", 7])
    assert FrameDecoder().feed(encode(frame)) == [frame]


def test_welcome_carries_a_nonzero_epoch_only():
    challenge = b"\x01" * CHALLENGE_SIZE
    assert encode(Welcome(2, "router-b", 1000, challenge)) == raw(
        [2, 2, "router-b", 1000, challenge])
    frame = Welcome(3, "router-b", 1000, challenge, 4)
    assert FrameDecoder().feed(encode(frame)) == [frame]


@pytest.mark.parametrize("items", [
    [1, [3], "router-b", -1],
    [1, [3], "router-b", 2**63],
    [2, 3, "router-b", 1000, b"\x01" * CHALLENGE_SIZE, -1],
    [11, [["router-b", 1, [], -1]]],
    [11, [["router-b", 1, [], 1, 2]]],
    [11, [["router-b", 1, [], True]]],
    [1, [3]],
], ids=["hello-negative", "hello-too-large", "welcome-negative", "routes-negative",
        "routes-five-items", "routes-bool", "hello-short"])
def test_epochs_are_checked_on_decode(items):
    with pytest.raises(WireError):
        FrameDecoder().feed(raw(items))


def test_routes_items_may_carry_an_epoch():
    frame = Routes([["router-b", 5, ["router-a"], 2], ["router-c", 9, []]])
    assert FrameDecoder().feed(encode(frame)) == [frame]


# -- version 4: batches ---------------------------------------------------------------

GOOD_ITEM = ["router-a:ab:1", "router-a", "router-c", "q", 1, 2.5, {"k": "v"}, b"body"]


@pytest.mark.parametrize("items, why", [
    ([26, 1, []], "1 to"),  # an empty batch
    ([27, []], "1 to"),
    ([26, 1, [GOOD_ITEM] * (BATCH_MAX_MESSAGES + 1)], "1 to"),
    ([27, [GOOD_ITEM] * (BATCH_MAX_MESSAGES + 1)], "1 to"),
    ([26, 0, [GOOD_ITEM]], "sequence"),
    ([26, -3, [GOOD_ITEM]], "sequence"),
    ([26, 2**63 - 1, [GOOD_ITEM, GOOD_ITEM]], "sequence"),
    ([26, 1, [GOOD_ITEM[:7]]], "items"),  # no body
    ([26, 1, [GOOD_ITEM + [b""]]], "items"),
    ([27, [GOOD_ITEM[:4] + [True] + GOOD_ITEM[5:]]], "items"),  # bool as hops
    ([27, [GOOD_ITEM[:5] + [2] + GOOD_ITEM[6:]]], "items"),  # int as accepted_at
    ([27, [GOOD_ITEM[:6] + [{"k": 1}] + GOOD_ITEM[7:]]], "items"),  # header value not str
    ([27, [GOOD_ITEM[:7] + ["body"]]], "items"),  # str as body
    ([27, [GOOD_ITEM, "not a message"]], "items"),
    ([27, [{"msg_id": "m"}]], "items"),
], ids=repr)
def test_batch_frames_refuse_what_is_not_a_batch_of_messages(items, why):
    with pytest.raises(WireError, match=why):
        FrameDecoder().feed(raw(items))


def test_a_batch_of_the_most_messages_decodes():
    frame = TransferBatch(2**63 - BATCH_MAX_MESSAGES, [GOOD_ITEM] * BATCH_MAX_MESSAGES)
    assert FrameDecoder().feed(encode(frame)) == [frame]
    assert frame.last_seq == 2**63 - 1


any_value = st.recursive(
    st.none() | st.booleans() | st.floats() | ints | st.text(max_size=10)
    | st.binary(max_size=10),
    lambda inner: st.lists(inner, max_size=9)
    | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=30,
)


@pytest.mark.timeout(120)
@FUZZ
@given(
    st.lists(st.one_of(st.just(GOOD_ITEM), any_value,
                       st.lists(any_value, min_size=8, max_size=8)), max_size=6),
    st.sampled_from([26, 27]),
    ints,
)
def test_arbitrary_batch_contents_give_a_batch_or_wire_error(messages, code, first_seq):
    """
    Whatever a peer puts in a batch's message list: a batch whose every
    message has the fields a message needs, or WireError.
    """
    items = [code, first_seq, messages] if code == 26 else [code, messages]
    try:
        (frame,) = FrameDecoder().feed(raw(items))
    except WireError:
        return
    assert 0 < len(frame.messages) <= BATCH_MAX_MESSAGES
    for message in frame.messages:
        assert [type(v) for v in message] == [str, str, str, str, int, float, dict, bytes]
        assert all(type(k) is str and type(v) is str for k, v in message[6].items())
