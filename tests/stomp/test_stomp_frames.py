"""
The sans-IO STOMP parser and encoder: the specification's examples,
every limit, and hypothesis over arbitrary bytes and arbitrary frames.
"""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshroute.sessions.limits import ClientLimits
from meshroute.stomp.frames import (
    CLIENT_COMMANDS,
    HEARTBEAT,
    HEARTBEAT_BYTES,
    SERVER_COMMANDS,
    StompFrame,
    StompLimits,
    StompParser,
    StompProtocolError,
    encode,
    read_as_1_0,
)

LIMITS = StompLimits(max_frame_size=1 << 20, max_headers=64, max_header_size=1 << 16)
FUZZ = settings(max_examples=300, deadline=None)


def parse(data: bytes, version: str = "1.2", limits: StompLimits = LIMITS, **kwargs) -> list:
    parser = StompParser(limits, **kwargs)
    parser.version = version
    return parser.feed(data)


def refusal(data: bytes, **kwargs) -> str:
    with pytest.raises(StompProtocolError) as raised:
        parse(data, **kwargs)
    return raised.value.reason


# -- the specification's examples -------------------------------------------------


def test_a_connect_frame():
    [frame] = parse(b"CONNECT\naccept-version:1.2\nhost:stomp.github.org\n\n\0")
    assert frame == StompFrame(
        "CONNECT", (("accept-version", "1.2"), ("host", "stomp.github.org")))


def test_a_send_frame_with_a_text_body():
    [frame] = parse(b"SEND\ndestination:/queue/a\ncontent-type:text/plain\n\nhello queue a\0")
    assert frame.command == "SEND"
    assert frame.header("destination") == "/queue/a"
    assert frame.header("content-type") == "text/plain"
    assert frame.body == b"hello queue a"


def test_a_repeated_header_reads_as_its_first_occurrence():
    [frame] = parse(b"MESSAGE\nfoo:World\nfoo:Hello\n\n\0", commands=SERVER_COMMANDS)
    assert frame.header("foo") == "World"
    assert frame.headers == (("foo", "World"), ("foo", "Hello"))
    assert frame.header("bar") is None and frame.header("bar", "x") == "x"


def test_content_length_carries_a_body_with_nul_bytes():
    [frame] = parse(b"SEND\ndestination:/queue/a\ncontent-length:5\n\na\0b\0c\0")
    assert frame.body == b"a\0b\0c"


def test_eols_between_frames_are_heart_beats():
    items = parse(b"\n\r\nSEND\n\nx\0\n\nBEGIN\ntransaction:t\n\n\0\r\n")
    assert items == [HEARTBEAT, HEARTBEAT, StompFrame("SEND", (), b"x"), HEARTBEAT, HEARTBEAT,
                     StompFrame("BEGIN", (("transaction", "t"),)), HEARTBEAT]
    assert parse(HEARTBEAT_BYTES) == [HEARTBEAT]


def test_stomp_1_2_lines_may_end_with_crlf():
    [frame] = parse(b"SEND\r\ndestination:/queue/a\r\n\r\nbody\0")
    assert frame == StompFrame("SEND", (("destination", "/queue/a"),), b"body")


def test_stomp_1_1_lines_end_with_lf_alone():
    [frame] = parse(b"SEND\nfoo:bar\r\n\n\0", version="1.1")
    assert frame.header("foo") == "bar\r"
    assert refusal(b"SEND\r\n\n\0", version="1.1").startswith("unknown command")


def test_header_escapes_are_undone():
    [frame] = parse(b"SEND\na\\cb:c\\\\d\\ne\\rf\n\n\0")
    assert frame.headers == (("a:b", "c\\d\ne\rf"),)


def test_stomp_1_1_has_no_carriage_return_escape():
    assert refusal(b"SEND\nfoo:a\\rb\n\n\0", version="1.1") == "bad escape \\r"
    [frame] = parse(b"SEND\nfoo:a\\cb\\n\n\n\0", version="1.1")
    assert frame.header("foo") == "a:b\n"


def test_stomp_1_0_has_no_escapes_and_drops_the_blanks_before_a_value():
    [frame] = parse(b"SEND\nfoo: \ta\\cb\\q\nbar:x: y\n\n\0", version="1.0")
    assert frame.headers == (("foo", "a\\cb\\q"), ("bar", "x: y"))
    [frame] = parse(b"SEND\nfoo:bar\r\n\n\0", version="1.0")
    assert frame.header("foo") == "bar\r"


def test_stomp_1_0_reads_a_connect_parsed_before_its_version_without_the_blanks():
    [connect] = parse(b"CONNECT\nlogin: app\npasscode:\t s\\c\n\n\0")
    assert read_as_1_0(connect) == StompFrame(
        "CONNECT", (("login", "app"), ("passcode", "s\\c")))


def test_stomp_1_0_writes_headers_as_they_are_unless_they_cannot_be():
    frame = StompFrame("MESSAGE", (("a", "b:c\\d"), ("e:f", "g"), ("h", "i\nj")))
    assert encode(frame, version="1.0") == (
        b"MESSAGE\na:b:c\\d\ne\\cf:g\nh:i\\nj\n\n\0")


def test_connect_and_connected_headers_are_never_unescaped():
    for version in ("1.0", "1.1", "1.2"):
        [connect] = parse(b"CONNECT\nlogin:a\\cb\\q\n\n\0", version=version)
        assert connect.header("login") == "a\\cb\\q"
        [connected] = parse(b"CONNECTED\nserver:x\\ny\n\n\0", version=version,
                            commands=SERVER_COMMANDS)
        assert connected.header("server") == "x\\ny"


def test_a_header_value_may_hold_a_colon():
    [frame] = parse(b"SEND\nurl:http://x:1/\n\n\0")
    assert frame.header("url") == "http://x:1/"


def test_frames_split_anywhere_parse_the_same():
    data = b"SEND\r\ndestination:/queue/a\r\ncontent-length:3\r\n\r\na\0b\0\n"
    whole = parse(data)
    for cut in range(len(data) + 1):
        parser = StompParser(LIMITS)
        assert parser.feed(data[:cut]) + parser.feed(data[cut:]) == whole
    parser = StompParser(LIMITS)
    assert sum((parser.feed(bytes([b])) for b in data), []) == whole


def test_buffered_counts_the_partial_frame():
    parser = StompParser(LIMITS)
    assert parser.feed(b"\nSEND\nfoo:b") == [HEARTBEAT]
    assert parser.pending == len(b"SEND\nfoo:b")
    assert parser.feed(b"ar\n\nbody\0") == [StompFrame("SEND", (("foo", "bar"),), b"body")]
    assert parser.pending == 0


def test_server_commands_are_refused_from_a_client_and_accepted_with_the_flag():
    assert refusal(b"MESSAGE\n\n\0") == "unknown command MESSAGE"
    assert parse(b"RECEIPT\nreceipt-id:7\n\n\0", commands=SERVER_COMMANDS) == [
        StompFrame("RECEIPT", (("receipt-id", "7"),))]
    assert refusal(b"SEND\n\n\0", commands=SERVER_COMMANDS) == "unknown command SEND"


def test_the_version_must_be_one_spoken():
    parser = StompParser(LIMITS)
    assert parser.version == "1.2"
    with pytest.raises(ValueError):
        parser.version = "0.9"
    with pytest.raises(ValueError):
        encode(StompFrame("SEND"), version="2.0")


# -- malformed frames --------------------------------------------------------------


@pytest.mark.parametrize("data, reason", [
    (b"FOO\n\n\0", "unknown command FOO"),
    (b"send\n\n\0", "unknown command send"),
    (b"SEND\nno colon here\n\n\0", "bad header line"),
    (b"SEND\n:empty name\n\n\0", "bad header line"),
    (b"SEND\nfoo:a\\qb\n\n\0", "bad escape \\q"),
    (b"SEND\nfoo:ends with\\\n\n\0", "bad escape \\"),
    (b"SEND\ncontent-length:three\n\nabc\0", "content-length not a number"),
    (b"SEND\ncontent-length:-1\n\n\0", "content-length not a number"),
    (b"SEND\ncontent-length:2\n\nabc\0", "missing NUL after body"),
    (b"SEND\nfoo:\xff\n\n\0", "header not UTF-8"),
])
def test_malformed_frames_are_refused_with_a_reason(data, reason):
    assert refusal(data) == reason


def test_garbage_is_refused_before_a_line_ends():
    parser = StompParser(LIMITS)
    with pytest.raises(StompProtocolError) as raised:
        parser.feed(b"GET / HTTP/1.1")
    assert raised.value.reason.startswith("unknown command GET / HTTP")


def test_the_first_content_length_decides():
    [frame] = parse(b"SEND\ncontent-length:1\ncontent-length:x\n\na\0")
    assert frame.body == b"a"


# -- limits ------------------------------------------------------------------------


def limits(**changes) -> StompLimits:
    return StompLimits(**{"max_frame_size": 1 << 20, "max_headers": 64,
                          "max_header_size": 1 << 16, **changes})


def test_limits_come_from_the_client_listener_limits():
    assert StompLimits.from_client_limits(ClientLimits(
        max_headers=7, max_header_size=99, max_frame_size=65536)) == StompLimits(
        max_frame_size=65536, max_headers=7, max_header_size=99)


def test_a_frame_of_max_frame_size_passes_and_one_byte_more_is_refused():
    frame = b"SEND\nfoo:bar\n\nbody\0"
    assert parse(frame, limits=limits(max_frame_size=len(frame)))
    assert refusal(frame, limits=limits(max_frame_size=len(frame) - 1)) == (
        f"frame larger than max-frame-size {len(frame) - 1} bytes")
    counted = b"SEND\ncontent-length:4\n\nbody\0"
    assert parse(counted, limits=limits(max_frame_size=len(counted)))
    assert "max-frame-size" in refusal(counted, limits=limits(max_frame_size=len(counted) - 1))


def test_an_oversized_body_is_refused_without_buffering_past_the_limit():
    parser = StompParser(limits(max_frame_size=1000))
    parser.feed(b"SEND\n\n" + b"x" * 900)
    assert parser.pending == 906
    with pytest.raises(StompProtocolError, match="max-frame-size 1000"):
        parser.feed(b"x" * 100)


def test_a_content_length_past_the_limit_is_refused_before_the_body():
    parser = StompParser(limits(max_frame_size=1000))
    with pytest.raises(StompProtocolError, match="max-frame-size 1000"):
        parser.feed(b"SEND\ncontent-length:5000\n\n")


def test_a_never_ending_header_line_is_refused_at_the_frame_limit():
    parser = StompParser(limits(max_frame_size=100, max_header_size=1000))
    with pytest.raises(StompProtocolError, match="max-frame-size 100"):
        parser.feed(b"SEND\nfoo:" + b"x" * 200)


def test_max_headers_counts_every_header_line():
    frame = b"SEND\n" + b"".join(b"h%d:v\n" % i for i in range(64)) + b"\n\0"
    assert parse(frame, limits=limits(max_headers=64))
    assert refusal(frame, limits=limits(max_headers=63)) == "too many headers (64 > 63)"
    flood = b"SEND\n" + b"h:v\n" * 65
    parser = StompParser(limits(max_headers=64))
    with pytest.raises(StompProtocolError, match=r"too many headers \(65 > 64\)"):
        parser.feed(flood)


def test_max_header_size_counts_names_and_values():
    frame = b"SEND\nabc:defg\nh:ij\n\n\0"
    assert parse(frame, limits=limits(max_header_size=10))
    assert refusal(frame, limits=limits(max_header_size=9)) == (
        "headers larger than max-header-size 9 bytes")


def test_a_long_partial_header_is_refused_before_its_line_ends():
    parser = StompParser(limits(max_header_size=100))
    with pytest.raises(StompProtocolError, match="max-header-size 100"):
        parser.feed(b"SEND\nfoo:" + b"x" * 200)


# -- the encoder -------------------------------------------------------------------


def test_encode_writes_the_frame_with_its_content_length():
    assert encode(StompFrame("SEND", (("destination", "/queue/a"),), b"a\0b")) == (
        b"SEND\ndestination:/queue/a\ncontent-length:3\n\na\0b\0")
    assert encode(StompFrame("DISCONNECT")) == b"DISCONNECT\n\n\0"


def test_encode_escapes_headers_per_version():
    frame = StompFrame("MESSAGE", (("a:b", "c\\d\ne\rf"),))
    assert encode(frame) == b"MESSAGE\na\\cb:c\\\\d\\ne\\rf\n\n\0"
    assert encode(frame, version="1.1") == b"MESSAGE\na\\cb:c\\\\d\\ne\rf\n\n\0"


def test_encode_leaves_connected_headers_alone_and_refuses_what_cannot_be_written():
    assert encode(StompFrame("CONNECTED", (("server", "a:b\\c"),))) == (
        b"CONNECTED\nserver:a:b\\c\n\n\0")
    for header in (("a:b", "c"), ("a", "b\nc"), ("a", "b\r"), ("", "x")):
        with pytest.raises(ValueError):
            encode(StompFrame("CONNECTED", (header,)))
    with pytest.raises(ValueError):
        encode(StompFrame("SEND", (("", "x"),)))


def test_encode_refuses_a_content_length_that_is_not_the_body_length():
    assert encode(StompFrame("SEND", (("content-length", "2"),), b"ab")) == (
        b"SEND\ncontent-length:2\n\nab\0")
    with pytest.raises(ValueError):
        encode(StompFrame("SEND", (("content-length", "3"),), b"ab"))


# -- hypothesis --------------------------------------------------------------------

pieces = st.sampled_from([
    b"SEND", b"CONNECT", b"SUBSCRIBE", b"ACK", b"\n", b"\r\n", b"\r", b":", b"\\",
    b"\\c", b"\\n", b"\\r", b"\\q", b"\0", b"content-length:", b"3", b"-", b"foo",
    b"\xff", b"\xc3\xa9",
])
eol = st.sampled_from([b"\n", b"\r\n"])
header_line = st.builds(
    lambda n, v, e: n + b":" + v + e,
    st.sampled_from([b"foo", b"a\\cb", b"destination"]),
    st.one_of(st.sampled_from([b"bar", b"2", b"a\\cb\\n", b"x:y", b""]), pieces), eol)
framelike = st.builds(
    lambda c, e, hs, e2, body: c + e + b"".join(hs) + e2 + body + b"\0",
    st.sampled_from([b"SEND", b"CONNECT", b"ACK", b"SUBSCRIBE"]), eol,
    st.lists(header_line, max_size=4), eol, st.binary(max_size=6))
counted_frame = st.builds(
    lambda c, e, body: c + e + b"content-length:%d" % len(body) + e + e + body + b"\0",
    st.sampled_from([b"SEND", b"NACK"]), eol, st.binary(max_size=8))
stream = st.lists(st.one_of(framelike, framelike, counted_frame, eol, pieces, st.binary(max_size=8)),
                  max_size=12).map(b"".join)
small = StompLimits(max_frame_size=48, max_headers=3, max_header_size=24)


def outcome(parser: StompParser, chunks: list[bytes]):
    """
    What the parser makes of C{chunks}: the items in order, and whether it
    refused the stream.
    """
    items = []
    try:
        for chunk in chunks:
            items += parser.feed(chunk)
    except StompProtocolError as e:
        assert isinstance(e.reason, str) and e.reason
        return items, True
    return items, False


@FUZZ
@given(data=stream, cuts=st.lists(st.integers(0, 400), max_size=6),
       version=st.sampled_from(["1.0", "1.1", "1.2"]), bounded=st.booleans())
def test_arbitrary_bytes_give_frames_or_the_one_error_in_any_split(data, cuts, version, bounded):
    """
    Arbitrary bytes give frames and heart-beats, or StompProtocolError and
    never another exception; feeding them in any split gives the same.
    """
    chosen = small if bounded else LIMITS
    whole = StompParser(chosen)
    whole.version = version
    items, refused = outcome(whole, [data])
    for item in items:
        assert item is HEARTBEAT or (
            isinstance(item, StompFrame) and item.command in CLIENT_COMMANDS)
    edges = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    split = StompParser(chosen)
    split.version = version
    split_items, split_refused = outcome(
        split, [data[a:b] for a, b in zip(edges, edges[1:])])
    assert split_refused == refused
    if not refused:
        assert split_items == items
        assert split.pending == whole.pending <= chosen.max_frame_size


names = st.text(min_size=1, max_size=12).filter(lambda n: n != "content-length")
values = st.text(max_size=20)
escaped_commands = sorted((CLIENT_COMMANDS | SERVER_COMMANDS) - {"CONNECT", "CONNECTED"})


@FUZZ
@given(command=st.sampled_from(escaped_commands),
       headers=st.lists(st.tuples(names, values), max_size=6),
       body=st.binary(max_size=64), version=st.sampled_from(["1.1", "1.2"]),
       heartbeats=st.integers(0, 3))
def test_encode_then_parse_gives_the_frame_back(command, headers, body, version, heartbeats):
    frame = StompFrame(command, tuple(headers), body)
    parser = StompParser(LIMITS, commands=CLIENT_COMMANDS | SERVER_COMMANDS)
    parser.version = version
    items = parser.feed(HEARTBEAT_BYTES * heartbeats + encode(frame, version) + b"\n")
    expected_headers = tuple(headers) + ((("content-length", str(len(body))),) if body else ())
    assert items == [HEARTBEAT] * heartbeats + [
        StompFrame(command, expected_headers, body), HEARTBEAT]


plain = st.text(st.characters(blacklist_characters="\n\r:", blacklist_categories=("Cs",)),
                min_size=1, max_size=12)


@FUZZ
@given(command=st.sampled_from(escaped_commands),
       headers=st.lists(st.tuples(plain.filter(lambda n: n != "content-length"), st.text(
           st.characters(blacklist_characters="\n\r", blacklist_categories=("Cs",)),
           max_size=20).filter(lambda v: v[:1] not in (" ", "\t"))), max_size=6),
       body=st.binary(max_size=64))
def test_stomp_1_0_round_trips_what_it_can_write_unescaped(command, headers, body):
    """
    Backslashes and colons in values included: 1.0 has no escapes.
    """
    frame = StompFrame(command, tuple(headers), body)
    parser = StompParser(LIMITS, commands=CLIENT_COMMANDS | SERVER_COMMANDS)
    parser.version = "1.0"
    expected_headers = tuple(headers) + ((("content-length", str(len(body))),) if body else ())
    assert parser.feed(encode(frame, "1.0")) == [StompFrame(command, expected_headers, body)]


@FUZZ
@given(command=st.sampled_from(["CONNECT", "CONNECTED"]),
       headers=st.lists(st.tuples(plain, st.text(
           st.characters(blacklist_characters="\n\r", blacklist_categories=("Cs",)),
           max_size=20)), max_size=6))
def test_connect_frames_round_trip_unescaped(command, headers):
    frame = StompFrame(command, tuple(headers))
    parser = StompParser(LIMITS, commands=CLIENT_COMMANDS | SERVER_COMMANDS)
    assert parser.feed(encode(frame)) == [frame]
