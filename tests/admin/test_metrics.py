"""
The counts behind C{/metrics} (L{meshroute.admin.metrics}), each where it
is kept: the event log's counts of what it records, and the link
registry's traffic per peer, which only grows across reconnections.
"""

from twisted.internet.task import Clock

from meshroute import events
from meshroute.events import EventLog
from meshroute.link.registry import LinkRegistry
from meshroute.link.traffic import Traffic, messages_in
from meshroute.wire.frames import Ack, FastTransferBatch, Keepalive, Transfer, TransferBatch


def test_the_event_log_counts_records_and_reasons(tmp_path):
    """
    One count per record, a batch's records included; reasons only for
    the events counted by reason.
    """
    log = EventLog(str(tmp_path), "r", Clock())
    log.emit(events.MESSAGE_FORWARDED, msg_id="m1")
    log.emit_many(events.MESSAGE_ACCEPTED, ("msg_id",), [("m1",), ("m2",), ("m3",)])
    log.emit(events.LINK_CLOSED, reason="keepalive")
    log.emit(events.LINK_CLOSED, reason="keepalive")
    log.emit(events.LINK_CLOSED, reason="shutdown")
    log.emit(events.SESSION_DISCONNECTED, reason="client")
    log.emit_many(events.MESSAGE_DROPPED, ("msg_id", "reason"),
                  [("m4", "max-depth"), ("m5", "max-depth"), ("m6", "max-hops")])
    log.close()
    assert log.counts == {events.MESSAGE_FORWARDED: 1, events.MESSAGE_ACCEPTED: 3,
                          events.LINK_CLOSED: 3, events.SESSION_DISCONNECTED: 1,
                          events.MESSAGE_DROPPED: 3}
    assert log.reasons == {(events.LINK_CLOSED, "keepalive"): 2,
                           (events.LINK_CLOSED, "shutdown"): 1,
                           (events.MESSAGE_DROPPED, "max-depth"): 2,
                           (events.MESSAGE_DROPPED, "max-hops"): 1}
    assert len(events.read_events(log.data_dir)) == 11


ITEM = ["m", "router-a", "router-b", "q", 1, 0.0, {}, b"body"]


def test_frames_carry_their_messages():
    assert [messages_in(frame) for frame in (
        Transfer(1, *ITEM), TransferBatch(1, [ITEM] * 3), FastTransferBatch([ITEM] * 2),
        Ack(3), Keepalive())] == [1, 3, 2, 0, 0]


class FakeLink:
    def __init__(self, peer: str, direction: str = "connector") -> None:
        self.peer = peer
        self.direction = direction
        self.traffic = Traffic()

    def carry(self, messages: int, size: int) -> None:
        self.traffic.sent(TransferBatch(1, [ITEM] * messages), size)
        self.traffic.messages_received += messages
        self.traffic.bytes_received += size


def test_a_peers_traffic_only_grows_across_its_links():
    """
    The registry adds a link's traffic to its peer's totals when it lets
    go of the name (closed, or released to a newer link), so the totals
    never go back; a link that never held the name (a stranger, a link
    refused as name-in-use) counts for nobody.
    """
    registry = LinkRegistry()
    first = FakeLink("router-b")
    registry.opened(first)
    assert registry.claim("router-b", first)
    first.carry(3, 100)
    assert registry.traffic() == {("router-b", "connector"): Traffic(3, 100, 3, 100)}
    refused = FakeLink("router-b")
    registry.opened(refused)
    assert not registry.claim("router-b", refused)
    refused.carry(50, 5000)
    registry.closed(refused)
    registry.release("router-b", first)
    registry.closed(first)
    assert registry.traffic() == {("router-b", "connector"): Traffic(3, 100, 3, 100)}
    second = FakeLink("router-b")
    registry.opened(second)
    assert registry.claim("router-b", second)
    second.carry(2, 10)
    inbound = FakeLink("router-c", "listener")
    registry.opened(inbound)
    assert registry.claim("router-c", inbound)
    assert registry.traffic() == {("router-b", "connector"): Traffic(5, 110, 5, 110),
                                  ("router-c", "listener"): Traffic()}
    registry.closed(second)
    assert registry.traffic()[("router-b", "connector")] == Traffic(5, 110, 5, 110)
