"""
The Twisted client API of meshroute: send messages through a router and
consume from its queues, over the native client protocol
(docs/client-protocol.md), in sessions that survive connection failures.

Example: send a message to queue C{orders} on router C{router-c} through
the local router's client listener, then consume queue C{orders} of the
local router until one message arrived::

    from twisted.internet import defer, task

    from meshroute.client import ClientOptions, connect


    async def main(reactor):
        options = ClientOptions(client_id="example", reconnect_attempts=-1,
                                confirmation_window_size=1024 * 1024)
        client = await connect(reactor, "tcp:127.0.0.1:6001", options)
        client.add_failure_listener(lambda event: print("connection failure:", event))
        try:
            # Fires once the message is durably stored by the local router.
            # Many sends may be in flight at once: pipelining is how
            # throughput is reached.
            msg_id = await client.send("orders@router-c", b"hello",
                                       headers={"content-type": "text/plain"},
                                       duplicate_id="example-1")
            print("accepted as", msg_id)

            one = defer.Deferred()

            def on_message(message):
                print(message.msg_id, message.body, message.redelivered)
                message.ack()
                if not one.called:
                    one.callback(None)

            subscription = await client.subscribe("orders", on_message, prefetch=100)
            await one
            await subscription.cancel()
        finally:
            await client.close()


    task.react(lambda reactor: defer.ensureDeferred(main(reactor)))

Sends fire with the message id once the router accepted the message
(persistent: once it is durable) and fail with L{SendError} (with the
router's C{code}: C{bad-address}, C{unknown-router}, C{backlog-full}, ...)
if it refused it.

Consuming: C{on_message} is called with each L{ReceivedMessage}; the
subscription never holds more than C{prefetch} messages delivered and not
yet acknowledged, and L{ReceivedMessage.ack} makes room for the next.
Acknowledgements are batched: all those made in one reactor turn travel in
one frame.  A message not acknowledged when its subscription ends (cancel,
close, session lost) goes back to the queue and is delivered again,
flagged C{redelivered}.  A subscription is made again each time the
session has to be recreated; C{subscription.when_ended()} fires when it
ends, and fails if it ended against the application's wishes (the router
refused to make it again, or the session ended).

Failures (L{ClientOptions}, Artemis' semantics): the client pings at a
third of its TTL when it sends nothing else, and treats a connection that
brought nothing for C{client_failure_check_period_ms} as failed.  After a
failure it reconnects under C{retry_interval_ms},
C{retry_interval_multiplier}, C{max_retry_interval_ms} and
C{reconnect_attempts} (default 0: it gives up at once).  With a
C{confirmation_window_size} (bytes of commands kept for replay; default
-1, none) it asks the router to resume the session and replays what the
router did not receive: the application sees nothing but a delay.  If the
session is gone (or there is no window) the client makes a new one and
subscribes again; calls in progress fail with L{UnblockedError} (retry
sends with the same C{duplicate_id} safely).  Failure listeners hear
C{FAILOVER} or C{DISCONNECT} (gave up: every call in progress fails with
L{UnblockedError}; nothing hangs).

Several endpoints: C{connect(reactor, ["tcp:10.0.0.2:6001",
"tcp:10.0.1.2:6001"])} tries them in turn (Artemis' static connector
list): a round is one attempt at each, the retry waits come between
rounds, and C{initial_connect_attempts} and C{reconnect_attempts} count
rounds; after a failure the next round starts at the endpoint after the
one that failed.  A session that moves to another router is recreated
there.  L{Client.endpoint} says which endpoint is in use.

High-availability pairs (docs/ha.md, "Clients"): an instance that is not
the active one refuses with C{not-active}, and the client tries the next
endpoint; the active one names the pair's endpoints, which join the list
(L{Client.endpoints}), and its epoch: the client refuses an instance
serving an older epoch than it has seen (a stale one).

Authentication (docs/security.md): on a router with users, C{connect(...,
user="orders-app", password=secret)} authenticates with SCRAM-SHA-256
(protocol version 5: the password never crosses the wire, and the client
checks the router's proof), or a C{tls:} endpoint string with
C{certificate=} and C{privateKey=} with a TLS client certificate.  A
failed login fails C{connect} with code C{not-authenticated}; a send or
subscription the user's permissions do not allow fails with
C{not-allowed}, and the session goes on.

Transactions (C{transacted=True}, a JMS transacted session): every send
and acknowledgement belongs to the current transaction, which
L{Client.commit} carries out atomically on the router, or
L{Client.rollback} discards (acknowledged messages come again, flagged
redelivered).  A transaction whose session was lost can only roll back
(L{TransactionRolledBack}); a commit in flight then fails with
L{TransactionOutcomeUnknown}.

Two-phase commit (client protocol version 7), in the names of PEP 249's
two-phase-commit extension, so that a Python transaction manager drives
meshroute beside a database: C{client.tpc_begin(client.xid(1, gtrid,
bqual))}, sends and acknowledgements, C{tpc_prepare()} (durable on the
router, replicated or in its shared store: it survives a SIGKILL and a
failover), then C{tpc_commit()} or C{tpc_rollback()}; a recovering
transaction manager lists the prepared ones with C{tpc_recover()} and
decides each with C{tpc_commit(xid)} or C{tpc_rollback(xid)}, from any
client of the same user.  A commit whose session was lost while it was
in flight fails with L{TransactionRetry} (XA_RETRY): committing the same
xid again completes it exactly once (the router remembers committed
xids for its duplicate-id window).  L{UnknownTransaction} and
L{HeuristicOutcome} say what became of a transaction otherwise
(docs/client-protocol.md, "Two-phase commit").

Message expiry (client protocol version 6): C{send(..., ttl=SECONDS)}
(and C{send_many}, L{Producer}'s) gives a message a time to live from its
acceptance; one not delivered by then never is, and waits in the
C{$expired} queue of the router where its time ran out.  With
C{notify_expiry=True} the router tells the client, best effort, through
the listeners of L{Client.add_expiry_listener}.  A time to live for an
older router fails the send with code C{unsupported}.

A client garbage-collected without L{Client.close} logs a warning naming
where it was created, and closes its connection.
"""

from meshroute.client.api import Client, connect, connect_endpoint, describe_body
from meshroute.client.producer import Producer
from meshroute.client.errors import (
    CLOSED,
    CONNECTION_LOST,
    TIMEOUT,
    TOO_LARGE,
    UNBLOCKED,
    UNSUPPORTED,
    ClientError,
    SendError,
    SessionError,
    SubscribeError,
    HeuristicOutcome,
    TransactionOutcomeUnknown,
    TransactionRetry,
    TransactionRolledBack,
    TransactionStateError,
    UnblockedError,
    UnknownTransaction,
)
from meshroute.client.options import DEFAULT_TTL_MS, DISCONNECT, FAILOVER, ClientOptions
from meshroute.client.subscriptions import ReceivedMessage, Subscription, TopicSubscription
from meshroute.client.two_phase import Xid

#: Default time to wait for the router's answer to Open, in seconds.
OPEN_TIMEOUT_S = ClientOptions().open_timeout_ms / 1000

__all__ = [
    "CLOSED", "CONNECTION_LOST", "DEFAULT_TTL_MS", "DISCONNECT", "FAILOVER", "OPEN_TIMEOUT_S",
    "TIMEOUT", "TOO_LARGE", "UNBLOCKED", "UNSUPPORTED", "Client", "ClientError", "ClientOptions",
    "HeuristicOutcome", "Producer", "ReceivedMessage",
    "SendError", "SessionError", "SubscribeError", "Subscription", "TopicSubscription",
    "TransactionOutcomeUnknown", "TransactionRetry", "TransactionRolledBack",
    "TransactionStateError", "UnblockedError", "UnknownTransaction", "Xid", "connect",
    "connect_endpoint", "describe_body",
]
