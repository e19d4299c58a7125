"""
One link's protocol and the link it feeds (L{meshroute.link.link}), one
end of a link at a time, the test playing the peer as in L{test_machine}:
frames cut anywhere, bytes that are no frames, a connection that breaks
alone, the transport's backpressure reaching the delivery channel, and
delivery's data frames going to the channel without the machine.

Sections: bytes in; backpressure; delivery's data frames.
"""

import struct

import msgpack
import pytest

from meshroute import events
from meshroute.link import reasons, stages
from meshroute.wire.codec import DEFAULT_MAX_FRAME_SIZE, encode
from meshroute.wire.frames import (
    Ack,
    Authenticate,
    Authenticated,
    FastTransfer,
    FastTransferBatch,
    Hello,
    Keepalive,
    Recovery,
    Transfer,
    TransferBatch,
    Welcome,
)
from support.link_peer import (  # noqa: F401 (router: a fixture)
    REMOTE,
    router,
    ConnectorPeer,
    ITEM,
    peer_for,
)


# -- bytes in ------------------------------------------------------------


def test_listener_accepts_frames_split_across_reads(router):
    """
    TCP may cut frames anywhere: feeding the handshake one byte at a time
    reaches the same place.
    """
    peer = router.listener()
    data = encode(Hello([2], REMOTE))
    for i in range(len(data)):
        peer.protocol.dataReceived(data[i : i + 1])
    (peer.welcome,) = peer.expect(Welcome)
    data = encode(Authenticate(peer.proof(), peer.challenge)) + encode(Recovery(3))
    for i in range(len(data)):
        peer.protocol.dataReceived(data[i : i + 1])
    peer.expect(Authenticated, Recovery)
    assert peer.core.stage == stages.DELIVERY
    assert peer.core.peer_last_received == 3


def _length(n: int) -> bytes:
    return struct.pack(">I", n)


GARBAGE = [
    pytest.param(_length(4) + b"\xc1\xc1\xc1\xc1", id="undecodable-body"),
    pytest.param(_length(3) + b"abc", id="trailing-data"),
    pytest.param(_length(DEFAULT_MAX_FRAME_SIZE + 1), id="oversized-length"),
    pytest.param(b"\xff\xff\xff\xff", id="huge-length"),
    pytest.param(_length(0), id="empty-frame"),
    pytest.param(_length(1) + msgpack.packb(7), id="body-not-an-array"),
    pytest.param(_length(2) + msgpack.packb([42]), id="unknown-frame-type"),
    pytest.param(b"GET / HTTP/1.1\r\n\r\n", id="http"),
]


@pytest.mark.parametrize("data", GARBAGE)
@pytest.mark.parametrize("direction", ["listener", "connector"])
def test_garbage_is_a_protocol_error(router, direction, data):
    peer = peer_for(router, direction)
    peer.written()
    peer.protocol.dataReceived(data)
    assert peer.written() == []
    record = peer.assert_closed(reasons.PROTOCOL_ERROR, "abort")
    assert record["stage"] == "connect"


def test_garbage_in_delivery_is_a_protocol_error(router):
    peer = router.listener()
    peer.to_delivery()
    peer.protocol.dataReceived(_length(DEFAULT_MAX_FRAME_SIZE + 1))
    record = peer.assert_closed(reasons.PROTOCOL_ERROR, "abort")
    assert record["stage"] == "delivery"
    assert not router.holds(REMOTE)


@pytest.mark.parametrize("direction", ["listener", "connector"])
def test_truncated_frame_then_connection_lost(router, direction):
    peer = peer_for(router, direction)
    peer.written()
    peer.protocol.dataReceived(encode(Welcome(2, REMOTE, 1000, b"c" * 32))[:-3])
    assert peer.how_closed == "open"  # waiting for the rest
    peer.complete_close()
    record = peer.closed_record()
    assert record["reason"] == reasons.PROTOCOL_ERROR
    assert record["detail"] == "truncated frame"
    assert peer.how_closed == "open"  # the peer went away; we aborted nothing


def test_broken_link_leaves_other_links_alone(router):
    broken = router.listener()
    healthy = router.listener()
    healthy.hello_welcomed()

    broken.protocol.dataReceived(b"\x00\x00\x00\x02\xc1\xc1")
    broken.assert_closed(reasons.PROTOCOL_ERROR, "abort")

    healthy.authenticate()
    healthy.expect(Authenticated, Recovery)
    healthy.send(Recovery(0))
    assert healthy.core.stage == stages.DELIVERY
    assert healthy.how_closed == "open"
    assert router.registry.links() == [healthy.link]
    assert router.holds(REMOTE)
    assert healthy.events(events.LINK_CLOSED) == []


# -- backpressure --------------------------------------------------------


@pytest.mark.parametrize("direction", ["listener", "connector"])
def test_a_full_transport_pauses_the_delivery_channel(router, direction):
    """
    The link protocol is its transport's streaming producer: a pause or a
    resume of the transport reaches the delivery stage's channel.
    """
    peer = peer_for(router, direction)
    assert peer.transport.producer is peer.protocol
    assert peer.transport.streaming
    peer.protocol.pauseProducing()  # before delivery: nothing to pause
    peer.protocol.resumeProducing()
    peer.to_delivery()
    channel = router.engine.channels[REMOTE]
    peer.protocol.pauseProducing()
    assert channel.paused
    peer.protocol.resumeProducing()
    assert not channel.paused


# -- delivery's data frames ------------------------------------------------


class _InputsSeen:
    """
    Stands in front of a link's machine and records the inputs it is fed.
    """

    def __init__(self, machine) -> None:
        self._machine = machine
        self.inputs: list[str] = []

    def __getattr__(self, name: str):
        self.inputs.append(name)
        return getattr(self._machine, name)


def _to_delivery_at(peer: ConnectorPeer, versions) -> None:
    peer.hello(versions=versions)
    (peer.welcome,) = peer.expect(Welcome)
    peer.authenticate()
    peer.expect(Authenticated, Recovery)
    peer.send(Recovery(0))
    assert peer.core.stage == stages.DELIVERY


DATA_FRAMES = [Transfer(1, *ITEM), TransferBatch(2, [ITEM, ITEM]), Ack(0),
               FastTransfer(*ITEM), FastTransferBatch([ITEM, ITEM])]


def test_delivery_data_frames_go_to_the_channel_without_the_machine(router):
    """
    In delivery (version 4) every data frame reaches the channel, and
    counts as hearing the peer, without a machine input; the machine
    still takes the others (a keepalive).
    """
    peer = router.listener()
    _to_delivery_at(peer, (2, 3, 4))
    assert peer.core.version == 4
    seen = peer.link.machine = _InputsSeen(peer.link.machine)
    peer.advance(0.5)
    peer.send(*DATA_FRAMES)
    assert router.engine.channels[REMOTE].frames == DATA_FRAMES
    assert peer.core.last_heard == peer.clock.seconds()
    assert seen.inputs == []
    peer.send(Keepalive())
    assert seen.inputs == ["got_keepalive"]


def test_batch_frames_on_a_version_3_link_are_a_protocol_error(router):
    peer = router.listener()
    _to_delivery_at(peer, (2, 3))
    assert peer.core.version == 3
    peer.send(Transfer(1, *ITEM), TransferBatch(2, [ITEM, ITEM]), Ack(0))
    assert router.engine.channels[REMOTE].frames == [Transfer(1, *ITEM)]
    record = peer.assert_closed(reasons.PROTOCOL_ERROR, "abort")
    assert "TransferBatch frame not expected at version 3" in record["detail"]


def test_data_frames_after_the_link_left_delivery_are_moot(router):
    """
    Once the machine has left delivery (here: the store failed), data
    frames no longer reach the channel.
    """
    peer = router.listener()
    _to_delivery_at(peer, (2, 3, 4))
    peer.link.machine.store_failed("disk full")
    peer.send(*DATA_FRAMES)
    assert router.engine.channels[REMOTE].frames == []
    peer.assert_closed(reasons.STORE_FAILED, "abort")
