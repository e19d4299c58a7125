"""
The headers that shape a STOMP topic subscription (docs/stomp.md,
"Topics"): on SUBSCRIBE, whether it is durable, shared and mesh-wide,
and which retained messages it is given; on UNSUBSCRIBE, whether it
ends a durable one for good; on SEND, whether a publication is retained.

 - B{Durable}: a client id and a name identify it, as Artemis and
   ActiveMQ have STOMP name it: the C{client-id} of the SUBSCRIBE, or else
   of the CONNECT, and the name in C{durable-subscription-name}
   (Artemis), C{durable-subscriber-name} (Artemis' older spelling) or
   C{activemq.subscriptionName} (ActiveMQ Classic), the first of them
   present in that order, as Artemis reads them.  A name without a client
   id is an C{ERROR}: the client's login is not taken for one (as
   Artemis, which asks for the CONNECT's C{client-id}).
 - B{Shared}: C{shared:true} lets several consumers take one durable
   subscription, each publication to one of them (JMS 2 shared
   subscriptions); without it a second consumer is refused, as ActiveMQ
   refuses one ("durable consumer is in use").  Neither ActiveMQ nor
   Artemis has a STOMP header for it (Artemis lets any number of
   consumers attach to a durable subscription's queue, with no header),
   so the header is ours, a boolean as C{persistent} is.
 - B{Mesh-wide}: C{mesh-wide:true} has the SUBSCRIBE answered (its
   C{RECEIPT}) only once the subscription's interest reached every
   router reachable now.
 - B{Retained messages} (docs/topics.md, "Retained messages"):
   C{retained:all} or C{retained:if-new} on SUBSCRIBE gives the
   subscription the retained messages its pattern matches first (MQTT's
   retain handling 0 and 1; C{none}, the default, is 2); C{retain:true}
   on SEND retains the publication (the native header C{x-retain}).
 - B{Forgetting}: an UNSUBSCRIBE carrying a durable subscription's name
   (and its client id, on the UNSUBSCRIBE or the CONNECT) deletes the
   durable subscription it ends, what it holds with it (Artemis and
   ActiveMQ do so); without the name it detaches only, and the
   subscription keeps collecting for its next consumer.

These headers belong to topic subscriptions: on a SUBSCRIBE to a queue
they are an C{ERROR}, not silently dropped (a client that believes its
queue subscription durable or mesh-wide is told it is not).
"""

from dataclasses import dataclass

from meshroute.stomp.destinations import StompRefusal
from meshroute.stomp.frames import StompFrame
from meshroute.topics.retained import NONE, RETAIN_HEADER, RETAINED_CHOICES

#: The headers naming a durable subscription, in the order they are read.
DURABLE_NAME_HEADERS = ("durable-subscription-name", "durable-subscriber-name",
                        "activemq.subscriptionName")
CLIENT_ID = "client-id"
SHARED = "shared"
MESH_WIDE = "mesh-wide"
RETAINED = "retained"
#: The SEND header retaining a publication.
RETAIN = "retain"


@dataclass(frozen=True)
class TopicOptions:
    """
    A topic subscription's shape: durable (C{durable}, its name, and
    C{client_id}) or not (both empty), C{shared}, C{mesh_wide}, the
    C{retained} messages it is given.
    """

    durable: str = ""
    client_id: str = ""
    shared: bool = False
    mesh_wide: bool = False
    retained: str = NONE

    def names(self, durable: str, client_id: str) -> bool:
        "Whether this is durable subscription C{durable} of C{client_id}."
        return bool(self.durable) and (durable, client_id) == (self.durable, self.client_id)


def durable_name(frame: StompFrame) -> str | None:
    """
    The durable subscription C{frame} names, or None.
    """
    for header in DURABLE_NAME_HEADERS:
        name = frame.header(header)
        if name is not None:
            return name
    return None


def flag(frame: StompFrame, header: str) -> bool:
    """
    A boolean header: C{true} or C{false} (any case); absent is false.

    @raise StompRefusal: any other value.
    """
    value = frame.header(header)
    if value is None or value.lower() == "false":
        return False
    if value.lower() == "true":
        return True
    raise StompRefusal(f"{header} {value!r} is not true or false")


def _client_id(frame: StompFrame, connect_client_id: str, name: str) -> str:
    client_id = frame.header(CLIENT_ID) or connect_client_id
    if not client_id:
        raise StompRefusal(f"durable subscription {name!r} needs a client-id, on CONNECT or "
                           f"on the {frame.command}")
    return client_id


def subscribe_options(frame: StompFrame, connect_client_id: str) -> TopicOptions:
    """
    The shape a SUBSCRIBE to a topic asks for, on a connection whose
    CONNECT carried C{connect_client_id} (empty: none).

    @raise StompRefusal: a durable name without a client id, a flag that
        is not a boolean, C{shared} on a subscription that is not durable.
    """
    name = durable_name(frame)
    shared, mesh_wide = flag(frame, SHARED), flag(frame, MESH_WIDE)
    retained = frame.header(RETAINED) or NONE
    if retained not in RETAINED_CHOICES:
        raise StompRefusal(f"retained {retained!r} is not one of {', '.join(RETAINED_CHOICES)}")
    if name is None:
        if shared:
            raise StompRefusal("shared:true is for durable subscriptions: name one with "
                               f"{DURABLE_NAME_HEADERS[0]}")
        return TopicOptions(mesh_wide=mesh_wide, retained=retained)
    return TopicOptions(name, _client_id(frame, connect_client_id, name), shared, mesh_wide,
                        retained)


def retain_header(frame: StompFrame) -> dict:
    """
    The native header a SEND's C{retain} makes: C{x-retain: true} for
    C{retain:true}, none for C{false} or none.

    @raise StompRefusal: another value.
    """
    return {RETAIN_HEADER: "true"} if flag(frame, RETAIN) else {}


def refuse_on_queue(frame: StompFrame) -> None:
    """
    A SUBSCRIBE to a queue carries none of the headers of topic
    subscriptions.

    @raise StompRefusal: it does.
    """
    for header in (*DURABLE_NAME_HEADERS, SHARED, MESH_WIDE, RETAINED):
        if frame.header(header) is not None:
            raise StompRefusal(f"{header} is for /topic/ subscriptions, not "
                               f"{frame.header('destination')!r}")


def forgets(frame: StompFrame, subscription_id: str, options: TopicOptions | None,
            connect_client_id: str) -> bool:
    """
    Whether an UNSUBSCRIBE of subscription C{subscription_id} (a topic
    subscription of shape C{options}, or None for a queue's) ends a
    durable subscription for good: it names it.

    @raise StompRefusal: it names a durable subscription, but not the one
        C{subscription_id} is (or names it without a client id).
    """
    name = durable_name(frame)
    if name is None:
        return False
    client_id = _client_id(frame, connect_client_id, name)
    if options is None or not options.names(name, client_id):
        raise StompRefusal(f"subscription {subscription_id!r} is not durable subscription "
                           f"{name!r} of client {client_id!r}")
    return True
