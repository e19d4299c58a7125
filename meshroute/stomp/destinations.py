"""
What a STOMP destination names, in the native protocol's terms
(docs/stomp.md, "Destinations"):

 - C{/queue/NAME} is queue C{NAME} of the router the client is connected
   to, C{/queue/NAME@ROUTER} queue C{NAME} of router C{ROUTER}: a SEND
   goes to either (the native address C{NAME} or C{NAME@ROUTER}), a
   SUBSCRIBE consumes from this router's queues only.
 - C{/topic/NAME} is a topic (docs/topics.md): a SEND publishes to it
   (the native address C{topic:NAME}), and a SUBSCRIBE to
   C{/topic/PATTERN} takes the publications whose topic matches the
   pattern (a native C{SubscribeTopic}).  A MESSAGE of such a
   subscription names the topic its publication was sent to
   (L{topic_destination}).

Topic names and patterns are checked here, where the destination is
still at hand: a malformed one is an C{ERROR} at once, naming the
destination, as any destination the router does not serve is (and a
SEND in a transaction is refused with its frame, not at the COMMIT).
Queue names are the router's to check, as they always were.
"""

from typing import NamedTuple

from meshroute.messages import TOPIC_PREFIX as TOPIC_ADDRESS_PREFIX
from meshroute.topics.patterns import BadTopic, parse_pattern, parse_topic

#: The destinations the router serves.
QUEUE_PREFIX = "/queue/"
TOPIC_PREFIX = "/topic/"


class StompRefusal(Exception):
    """
    A frame the adapter cannot turn into a command: C{ERROR} with
    C{detail}, then close.
    """

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class Source(NamedTuple):
    """
    What a SUBSCRIBE consumes: this router's C{queue}, or the topics
    matching C{pattern}: one of the two is set, never empty.
    """

    queue: str = ""
    pattern: str = ""


def _named(destination: str | None) -> str:
    if destination is None:
        raise StompRefusal("the frame has no destination header")
    for prefix in (QUEUE_PREFIX, TOPIC_PREFIX):
        if destination.startswith(prefix) and len(destination) > len(prefix):
            return destination
    raise StompRefusal(f"destination {destination!r} is not /queue/NAME, "
                       "/queue/NAME@ROUTER or /topic/NAME")


def send_address(destination: str | None) -> str:
    """
    The native address a SEND to C{destination} goes to: C{NAME} or
    C{NAME@ROUTER} for a queue, C{topic:NAME} for a topic.

    @raise StompRefusal: another kind of destination, none, or a
        malformed topic name.
    """
    destination = _named(destination)
    if destination.startswith(QUEUE_PREFIX):
        return destination[len(QUEUE_PREFIX):]
    topic = destination[len(TOPIC_PREFIX):]
    try:
        parse_topic(topic)
    except BadTopic as e:
        raise StompRefusal(f"destination {destination!r}: {e}") from None
    return f"{TOPIC_ADDRESS_PREFIX}{topic}"


def subscription_source(destination: str | None, router: str) -> Source:
    """
    What a SUBSCRIBE to C{destination} on router C{router} consumes.

    @raise StompRefusal: another kind of destination, none, another
        router's queue, or a malformed pattern.
    """
    destination = _named(destination)
    if destination.startswith(QUEUE_PREFIX):
        queue, _, named = destination[len(QUEUE_PREFIX):].partition("@")
        if not queue:
            raise StompRefusal(f"destination {destination!r} names no queue")
        if named and named != router:
            raise StompRefusal(f"destination {destination!r}: subscriptions are to this "
                               f"router's queues ({router})")
        return Source(queue=queue)
    pattern = destination[len(TOPIC_PREFIX):]
    try:
        parse_pattern(pattern)
    except BadTopic as e:
        raise StompRefusal(f"destination {destination!r}: {e}") from None
    return Source(pattern=pattern)


def topic_destination(topic: str) -> str:
    """
    The destination a MESSAGE of a publication to C{topic} names.
    """
    return f"{TOPIC_PREFIX}{topic}"
