"""
Which waiting item of a local queue goes next, and to which consumer
(meshroute.router.delivery_order): pure, over a QueueState and plain
consumers.
"""

from dataclasses import dataclass

from meshroute.messages import Message
from meshroute.router.delivery_order import next_consumer, next_delivery
from meshroute.router.queue_state import QueueItem, QueueState


@dataclass
class Consumer:
    name: str
    credit: int = 1
    holding_persistent: bool = False


def item(state: QueueState, entry_id: int | None, body: bytes) -> QueueItem:
    message = Message(msg_id=body.decode(), origin="r1", dest_router="r1", dest_queue=state.name,
                      body=body)
    return QueueItem(entry_id, message, False, next(state.seq))


def drain(state: QueueState) -> list[tuple[str, bytes, bool]]:
    taken = []
    while (picked := next_delivery(state)) is not None:
        consumer, picked_item, waited = picked
        consumer.credit -= 1
        taken.append((consumer.name, picked_item.message.body, waited))
    return taken


def test_nothing_goes_without_a_consumer_with_credit():
    state = QueueState("q")
    state.transient.append(item(state, None, b"t"))
    assert next_delivery(state) is None
    state.consumers.append(Consumer("a", credit=0))
    assert next_delivery(state) is None
    assert len(state.transient) == 1


def test_returned_items_come_first_then_the_two_streams_alternate():
    state = QueueState("q")
    state.consumers.append(Consumer("a", credit=10))
    state.buffer.extend([item(state, 1, b"p1"), item(state, 2, b"p2")])
    state.transient.extend([item(state, None, b"t1"), item(state, None, b"t2")])
    state.returned.append(item(state, 0, b"r"))
    assert [(body, waited) for _, body, waited in drain(state)] == [
        (b"r", False), (b"t1", True), (b"p1", False), (b"t2", True), (b"p2", False)]


def test_deliveries_go_round_robin_among_consumers_with_credit():
    state = QueueState("q")
    state.consumers.extend([Consumer("a", credit=2), Consumer("b", credit=0),
                            Consumer("c", credit=1)])
    state.transient.extend(item(state, None, b"%d" % n) for n in range(4))
    assert [name for name, _, _ in drain(state)] == ["a", "c", "a"]
    assert len(state.transient) == 1


def test_a_holding_consumer_takes_no_persistent_item_and_lets_a_transient_one_by():
    state = QueueState("q")
    state.consumers.append(Consumer("a", credit=5, holding_persistent=True))
    state.buffer.append(item(state, 1, b"p"))
    state.transient.append(item(state, None, b"t"))
    assert drain(state) == [("a", b"t", True)]
    assert [queued.message.body for queued in state.buffer] == [b"p"]
    assert next_consumer(state, True) is None
    assert next_consumer(state, False).name == "a"
