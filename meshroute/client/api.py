"""
The application's objects: L{Client}, and L{connect} / L{connect_endpoint}
that make one (its high-rate sender, L{Producer}, is
L{meshroute.client.producer}'s).
"""

import base64
import os
import traceback
import weakref
from collections.abc import Callable
from dataclasses import replace
from functools import partial

from twisted.internet.defer import Deferred, fail
from twisted.internet.endpoints import clientFromString
from twisted.internet.interfaces import IReactorTime, IStreamClientEndpoint

from meshroute.client.commands import COMMIT, ROLLBACK, SendDeferred, SendGroup
from meshroute.client.errors import SendError
from meshroute.client.options import ClientOptions
from meshroute.client.core import ClientCore
from meshroute.client.producer import Producer
from meshroute.client.send_items import send_item, send_items, send_refusal
from meshroute.client.subscriptions import (
    ReceivedMessage,
    Subscription,
    TopicSubscription,
    checked_durable,
)
from meshroute.messages import TOPIC_PREFIX
from meshroute.topics.retained import NONE, RETAINED_CHOICES
from meshroute.client.transactions import TPC_COMMIT, TPC_ROLLBACK
from meshroute.client.two_phase import PREPARE, Xid, checked_xid
from meshroute.link.rotation import EndpointRotation

#: Frames of the call stack kept to say where a client was created.
_CREATION_FRAMES = 4
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


class Client:
    """
    One session with a router, which survives failures of its connection
    as L{ClientOptions} says.  Made by L{connect}.

    @ivar options: the L{ClientOptions} it was made with.
    @ivar client_id: what this client called itself.
    @ivar created_at: where it was created (a short stack summary).
    """

    def __init__(self, core: ClientCore) -> None:
        self._core = core
        self.options = core.options
        self.client_id = core.client_id
        self.created_at = core.created_at
        # The core (what the connection keeps alive) does not reference
        # this object, so an application that drops it without close()
        # lets it be collected, and this says so.
        self._finalizer = weakref.finalize(self, core.forgotten)
        self._finalizer.atexit = False

    @property
    def router(self) -> str | None:
        "The router's name."
        return self._core.connection.router

    @property
    def endpoint(self) -> str:
        """
        The endpoint of the connection in use (or of the latest attempt):
        the string given to L{connect}, or the endpoint's C{repr}.
        """
        return self._core.connection.endpoints.current

    @property
    def endpoints(self) -> tuple[str, ...]:
        """
        Every endpoint the client tries, in turn: those given to
        L{connect}, then those its router's pair named (docs/ha.md,
        "Clients").
        """
        return self._core.connection.endpoints.descriptions

    @property
    def session_id(self) -> str:
        "The session's id (from the router; it changes when recreated)."
        return self._core.session_id

    @property
    def ttl_ms(self) -> int:
        "The connection TTL in force (the router's override, or ours)."
        return self._core.connection.ttl_ms

    @property
    def last_failover(self) -> str | None:
        """
        How the latest connection failure was survived: C{"reattached"}
        (transparently) or C{"recreated"} (in-progress calls unblocked);
        None if none happened.
        """
        return self._core.last_failover

    # -- calls ------------------------------------------------------------------

    def send(self, address: str, body: bytes, headers: dict | None = None,
             persistent: bool = True, duplicate_id: str | None = None,
             ttl: float | None = None, notify_expiry: bool = False) -> Deferred:
        """
        Send C{body} to C{address} (C{queue@router}, or a bare C{queue} of
        this router).

        @param duplicate_id: makes the send idempotent: the router accepts
            one message per duplicate id within its duplicate-id window, and
            answers a repeat with the first message's id.  Retry a send that
            failed with L{UnblockedError} with the same duplicate id.
        @param ttl: the message's time to live in seconds from its
            acceptance (None: it never expires): not delivered after it,
            but set aside in the C{$expired} queue of the router where its
            time ran out.  Needs a router of client protocol version 6
            (L{SendError} code C{unsupported} otherwise).
        @param notify_expiry: with C{ttl}, have the router tell this client
            if the message expires (L{add_expiry_listener}).
        @return: Deferred firing with the message id once the router
            accepted it (durably, when C{persistent}); failing with
            L{SendError} if the router refused it (or, with code
            C{too-large}, the message cannot fit in one client frame, and
            nothing was sent), L{UnblockedError} if the
            session failed and could not be resumed while it was in
            progress, or L{SessionError} if the client is closed.
        @raise TypeError: C{address} is not a string, C{body} is not bytes,
            C{headers} does not map strings to strings, or C{duplicate_id}
            is not a string.
        """
        message = send_item(address, body, headers, persistent, duplicate_id, ttl,
                             notify_expiry)
        refusal = send_refusal(self._core.connection.version, message)
        if refusal is not None:
            return fail(refusal)
        d = SendDeferred()
        self._core.sends.send_later([message], d)
        return d

    def send_many(self, address: str, bodies, headers: dict | None = None,
                  persistent: bool = True, ttl: float | None = None,
                  notify_expiry: bool = False) -> Deferred:
        """
        Send every body of C{bodies} to C{address}, in order, with the same
        C{headers} (and C{ttl}, C{notify_expiry}), as that many L{send}s
        would, with ONE Deferred for them all: the way to send at a high
        rate (a Deferred per message costs more than the rest of a send).
        They travel in SendBatch frames (with a version-4 router), with the
        sends of the same turn, and the router stores each frame's with one
        store call.

        @return: ONE Deferred for the batch, firing with the message ids
            in order once every message was accepted; failing with the
            failure of the first message that failed (L{SendError} ...,
            as L{send}'s) once every send has its outcome.  A body too
            large for one frame fails it at once with L{SendError} code
            C{too-large}, and none of the batch is sent.
        @raise TypeError: as L{send}, for any of the bodies.
        """
        try:
            messages = send_items(self._core.connection.version, address, bodies, headers,
                                   persistent, ttl, notify_expiry)
        except SendError as e:
            return fail(e)
        group = SendGroup(len(messages))
        if messages:
            self._core.sends.send_later(messages, group)
        else:
            group.deferred.callback([])
        return group.deferred

    def publish(self, topic: str, body: bytes, headers: dict | None = None,
                persistent: bool = True, duplicate_id: str | None = None,
                ttl: float | None = None) -> Deferred:
        """
        Publish C{body} to C{topic} (C{prices.eu.gbp}): every subscription
        in the mesh whose pattern matches it gets a copy (docs/topics.md).
        A L{send} to C{topic:TOPIC}, answered as one (C{bad-address} for a
        malformed topic; C{unsupported} from a router older than client
        protocol version 8).
        """
        if type(topic) is not str:
            raise TypeError(f"topic must be a string, not {type(topic).__name__}")
        return self.send(TOPIC_PREFIX + topic, body, headers, persistent, duplicate_id, ttl)

    def producer(self, window: int = 10_000) -> Producer:
        """
        A L{Producer}: sends with at most C{window} of them in flight.
        """
        return Producer(self, window)

    def subscribe(self, queue: str, on_message: Callable[[ReceivedMessage], None],
                  prefetch: int = 100, max_messages: int | None = None) -> Deferred:
        """
        Consume from C{queue} of this router: C{on_message(message)} is
        called for each message, which the application acknowledges with
        C{message.ack()}.  If the session has to be recreated after a
        failure the subscription is made again (messages delivered and not
        acknowledged then come again, flagged redelivered).

        @param prefetch: most messages delivered and not yet acknowledged.
        @param max_messages: stop asking for messages after this many.
        @return: Deferred firing with a L{Subscription} once the router
            confirmed; failing with L{SubscribeError} (e.g. C{bad-address}),
            L{UnblockedError} or L{SessionError}.
        """
        if type(queue) is not str:
            raise TypeError(f"queue must be a string, not {type(queue).__name__}")
        _check_prefetch(prefetch, max_messages)
        return self._core.subscribe(partial(Subscription, queue=queue, on_message=on_message,
                                            prefetch=prefetch, max_messages=max_messages))

    def subscribe_topic(self, pattern: str, on_message: Callable[[ReceivedMessage], None],
                        durable: str | None = None, client_id: str | None = None,
                        shared: bool = False, mesh_wide: bool = False, prefetch: int = 100,
                        max_messages: int | None = None, retained: str = "none") -> Deferred:
        """
        Consume the publications whose topic matches C{pattern}
        (C{prices.*.gbp}: C{*} one word, C{#} zero or more) from anywhere in
        the mesh, as L{subscribe} consumes a queue (docs/topics.md).

        @param durable: a durable subscription's name: the router keeps it
            collecting while nobody consumes it, until
            C{unsubscribe(forget=True)}.
        @param client_id: with C{durable}, the client id naming it (default:
            L{ClientOptions}' C{client_id}; one of them is needed).
        @param shared: several consumers of a durable one, each publication
            to one of them.
        @param mesh_wide: fire once its interest reached every router
            reachable now (C{timeout} after 30 s: it is not made).
        @param retained: the retained messages matching C{pattern}
            (docs/topics.md, "Retained messages") it is given first:
            C{"none"}, C{"all"}, or C{"if-new"} (none if a durable
            subscription exists with this pattern); each such message's
            L{ReceivedMessage.retained} is true.
        @return: Deferred firing with a L{TopicSubscription}; failing with
            L{SubscribeError} (C{bad-address}, C{subscription-in-use},
            C{not-allowed}, C{timeout}, C{unsupported} before version 8,
            or before version 9 with C{retained}), L{UnblockedError} or
            L{SessionError}.
        @raise ValueError: C{durable} without a client id, C{shared}
            without C{durable}, C{retained} not one of its values, or a
            C{prefetch} L{subscribe} refuses.
        """
        durable, client_id = checked_durable(durable, client_id, shared,
                                             self.options.client_id)
        if type(pattern) is not str:
            raise TypeError(f"pattern must be a string, not {type(pattern).__name__}")
        _check_prefetch(prefetch, max_messages)
        if retained not in RETAINED_CHOICES:
            raise ValueError(f"retained must be one of {RETAINED_CHOICES}, not {retained!r}")
        refusal = self._core.deliveries.topics_refusal(retained != NONE)
        if refusal is not None:
            return fail(refusal)
        return self._core.subscribe(partial(
            TopicSubscription, pattern=pattern, on_message=on_message, prefetch=prefetch,
            max_messages=max_messages, durable=durable, client_id=client_id,
            shared=bool(shared), mesh_wide=bool(mesh_wide), retained=retained))

    def commit(self) -> Deferred:
        """
        Commit the current transaction (a client made with
        C{transacted=True}): every send and acknowledgement since the last
        commit or rollback is carried out by the router at once, or none.

        @return: Deferred firing with None once durable (each send's own
            Deferred fires first, with its message id); failing with
            L{TransactionRolledBack} (nothing was done) or
            L{TransactionOutcomeUnknown} (the session failed during the
            commit and could not be resumed).
        """
        return self._core.request_end_of_transaction(COMMIT)

    def rollback(self) -> Deferred:
        """
        Roll the current transaction back: its sends are discarded (they
        fail with L{TransactionRolledBack}) and the messages it
        acknowledged are delivered again, flagged redelivered.
        """
        return self._core.request_end_of_transaction(ROLLBACK)

    # -- two-phase commit (PEP 249's names) ---------------------------------------

    def xid(self, format_id: int, global_transaction_id: str,
            branch_qualifier: str) -> Xid:
        """
        A transaction id for L{tpc_begin} (PEP 249's C{Connection.xid}):
        an L{Xid}, a named tuple of the three.

        @param format_id: XA's format id, from 0 to 2**31 - 1.
        @param global_transaction_id: 1 to 64 characters.
        @param branch_qualifier: at most 64 characters.
        @raise ValueError: one of them is not so.
        """
        return checked_xid((format_id, global_transaction_id, branch_qualifier))

    def tpc_begin(self, xid) -> None:
        """
        Begin two-phase transaction C{xid} (a client made with
        C{transacted=True}, outside a transaction: nothing sent or
        acknowledged since the last commit or rollback): the sends and
        acknowledgements from now on are its work, until L{tpc_prepare}
        (or a one-phase L{tpc_commit}, or L{tpc_rollback}).

        @param xid: an L{Xid} (L{xid}) or a triple.
        @raise ValueError: C{xid} is not a valid xid.
        @raise TransactionStateError: the current transaction has work,
            or a prepared one awaits L{tpc_commit} or L{tpc_rollback}.
        @raise ClientError: C{not-transacted}, C{unsupported} (a router
            older than client protocol version 7), or C{closed}.
        """
        self._core.tpc_begin(checked_xid(xid))

    def tpc_prepare(self) -> Deferred:
        """
        Prepare the transaction L{tpc_begin} began: the router stores its
        sends and acknowledgements durably (replicated to an HA pair's
        backup, or in its shared store), not carried out, until a commit
        or rollback of its xid, from this client or any other of the same
        user, after any restart or failover.  Its acknowledged messages
        are delivered to nobody meanwhile.  Until L{tpc_commit} or
        L{tpc_rollback}, nothing may be sent (L{TransactionStateError}).

        @return: Deferred firing with None once durable; failing with
            L{TransactionRolledBack} (with the router's code: a refused
            send's, C{duplicate-xid} ...: nothing of it was done, also
            when the session was lost during the prepare and the
            transaction was rolled back in the next one),
            L{TransactionOutcomeUnknown} (lost, and it could not be rolled
            back: it may be prepared; see L{tpc_recover}), or
            L{TransactionStateError} (no L{tpc_begin}).
        """
        return self._core.request_end_of_transaction(PREPARE)

    def tpc_commit(self, xid=None) -> Deferred:
        """
        Without C{xid}: commit the transaction L{tpc_prepare} prepared, or,
        when it was not prepared, the one L{tpc_begin} began, in one
        phase.  With C{xid}: commit that transaction (a prepared one,
        whoever prepared it: recovery), or the current one in one phase
        if it is its xid.  Each send's Deferred of this client's
        transaction fires with its message id first.

        @return: Deferred firing with None once durable, also when the
            router committed that xid before (within its duplicate-id
            window: a retry completes exactly once); failing with
            L{TransactionRetry} (the session was lost while the commit was
            in flight: call C{tpc_commit(xid)} again, e.g. once the client
            reached the instance that took over), L{UnknownTransaction}
            (nothing of that xid is prepared or was committed: it was
            rolled back, or never prepared), L{HeuristicOutcome}
            (C{heuristic-mixed}: committed, but some messages it
            acknowledged were no longer held), L{TransactionRolledBack} (a
            one-phase commit that did nothing), L{TransactionStateError}
            or a L{ClientError} (C{internal-error}: it stays prepared; try
            again later).
        """
        return self._decision(TPC_COMMIT, xid)

    def tpc_rollback(self, xid=None) -> Deferred:
        """
        Without C{xid}: roll back the transaction L{tpc_prepare}
        prepared, or, when it was not prepared, the one L{tpc_begin}
        began.  With C{xid}: roll back that transaction (a prepared one,
        whoever prepared it: recovery).  The messages it acknowledged go
        back to their queues, flagged redelivered.

        @return: Deferred firing with None once done; failing with
            L{TransactionRetry} (lost in flight: call it again),
            L{UnknownTransaction} (nothing of that xid is prepared),
            L{HeuristicOutcome} (C{heuristic-commit}: it was committed;
            C{heuristic-mixed}: some acknowledged messages could not be
            given back), L{TransactionStateError} or a L{ClientError}.
        """
        return self._decision(TPC_ROLLBACK, xid)

    def tpc_recover(self) -> Deferred:
        """
        @return: Deferred firing with the L{Xid}s of the transactions
            prepared on the router by this client's user (by anyone on a
            router without users) and not yet committed or rolled back,
            oldest first: what a transaction manager recovering after a
            failure decides with L{tpc_commit} or L{tpc_rollback}.
        """
        return self._core.tpc_recover()

    def _decision(self, ending: str, xid) -> Deferred:
        if xid is not None:
            try:
                xid = checked_xid(xid)
            except ValueError as e:
                return fail(e)
        return self._core.request_end_of_transaction(ending, xid)

    def ping(self) -> Deferred:
        """
        @return: Deferred firing with the round-trip time in seconds;
            failing with L{SessionError} when not connected.
        """
        d = Deferred()
        self._core.machine.ping_requested(d)
        return d

    def add_failure_listener(self, listener: Callable[[str], object]) -> None:
        """
        Call C{listener(event)} on every failure of the connection:
        C{"FAILOVER"} once the session was reattached or recreated on a new
        connection, C{"DISCONNECT"} when the client gave up (then every
        call in progress fails with L{UnblockedError}).
        """
        self._core.listeners.append(listener)

    def remove_failure_listener(self, listener: Callable[[str], object]) -> None:
        """
        Stop calling C{listener}.
        """
        self._core.listeners.remove(listener)

    def add_expiry_listener(self, listener: Callable[[str, str, str], object]) -> None:
        """
        Call C{listener(msg_id, address, router)} when a message this
        client sent with C{notify_expiry} expired at C{router} before it
        was delivered.  One callback for the client, not a Deferred per
        send: a producer that does not ask pays nothing.  Best effort
        (docs/client-protocol.md, "Message expiry"): a notice can be lost
        with a link, a router, or a session that was not resumed.
        """
        self._core.expiry_listeners.append(listener)

    def remove_expiry_listener(self, listener: Callable[[str, str, str], object]) -> None:
        """
        Stop calling C{listener}.
        """
        self._core.expiry_listeners.remove(listener)

    def close(self) -> Deferred:
        """
        End the session: the router finishes the commands in progress
        (so every send made before fires first), puts unacknowledged
        messages back, and closes.  Fires when the connection is closed.
        """
        self._finalizer.detach()
        d = self._core.when_closed()
        d.addErrback(lambda failure: None)
        self._core.machine.close_requested()
        return d

    def when_closed(self) -> Deferred:
        """
        @return: Deferred firing with None when the session ends by
            L{close}, or failing with L{SessionError} when it ends otherwise
            (the router refused it, or reconnection gave up).
        """
        return self._core.when_closed()


def _check_prefetch(prefetch: int, max_messages: int | None) -> None:
    """
    @raise ValueError: C{prefetch} is below 1, or C{max_messages} below 0.
    """
    if prefetch < 1:
        raise ValueError("prefetch must be at least 1")
    if max_messages is not None and max_messages < 0:
        raise ValueError("max_messages must not be negative")


def _where_created() -> str:
    """
    The last few frames of the caller's stack outside this package.
    """
    stack = [frame for frame in traceback.extract_stack()[:-1]
             if not os.path.abspath(frame.filename).startswith(_PACKAGE_DIR)]
    return "".join(traceback.format_list(stack[-_CREATION_FRAMES:])).rstrip()


def _default_client_id() -> str:
    return f"meshroute-{os.getpid()}"


def connect_endpoint(reactor: IReactorTime, endpoint, options: ClientOptions | None = None,
                     endpoint_from_string: Callable[[str], IStreamClientEndpoint] | None = None,
                     **overrides) -> Deferred:
    """
    Like L{connect}, with an C{IStreamClientEndpoint} or a list of them
    (used again, in turn, for every reconnection).  Logs and
    L{Client.endpoint} name each by its C{repr}.

    @param endpoint_from_string: makes the endpoint of each endpoint string
        the router names as its pair's (default: C{clientFromString} on
        C{reactor}); one whose C{repr} equals a string is not added again.
    """
    if endpoint_from_string is None:
        endpoint_from_string = _from_string(reactor)
    return _connect(reactor, [(repr(e), e) for e in _listed(endpoint)], options, overrides,
                    endpoint_from_string)


def _from_string(reactor) -> Callable[[str], IStreamClientEndpoint]:
    return lambda description: clientFromString(reactor, description)


def _listed(one_or_more) -> list:
    """
    C{one_or_more} as a list: a list or tuple as it is, anything else as
    its only item.  (An empty list is refused by L{EndpointRotation}.)
    """
    return list(one_or_more) if isinstance(one_or_more, (list, tuple)) else [one_or_more]


def _connect(reactor: IReactorTime, endpoints: list, options: ClientOptions | None,
             overrides: dict,
             endpoint_from_string: Callable[[str], IStreamClientEndpoint]) -> Deferred:
    """
    Make the client and start its first connection attempt.

    @param endpoints: (description, endpoint) pairs, in the order to try.
    """
    options = replace(options or ClientOptions(), **overrides)
    client_id = options.client_id if options.client_id is not None else _default_client_id()
    core = ClientCore(reactor, EndpointRotation(endpoints), options, client_id,
                      _where_created(), endpoint_from_string)
    return core.connect(Client(core))


def connect(reactor, endpoint_string: str | list[str], options: ClientOptions | None = None,
            **overrides) -> Deferred:
    """
    Connect to a router's client listener and open a session.

    @param reactor: the reactor (an C{IReactorTime} that can connect); every
        timer of the client uses it.
    @param endpoint_string: a Twisted client endpoint string, e.g.
        C{"tcp:127.0.0.1:6001"} or C{"tls:router.example:6001"}, or a list
        of them (the instances of a pair, a router at two addresses),
        tried in turn: a round is one attempt at each, the retry waits
        come between rounds, and C{initial_connect_attempts} and
        C{reconnect_attempts} count rounds (docs/client-protocol.md,
        "Several endpoints").
    @param options: L{ClientOptions} (default: Artemis' defaults: no
        reconnection, no confirmation window).
    @param overrides: fields of L{ClientOptions} to change, e.g.
        C{client_id="shop-7"}.
    @return: Deferred firing with a L{Client}; failing with
        L{SessionError} if the session cannot be made within
        C{initial_connect_attempts}.  Cancelling it gives up.
    """
    from_string = _from_string(reactor)
    return _connect(reactor, [(s, from_string(s)) for s in _listed(endpoint_string)], options,
                    overrides, from_string)


def describe_body(body: bytes) -> dict:
    """
    A body as JSON wants it: C{{"body": text}} when it is UTF-8, else
    C{{"body": base64, "encoding": "base64"}}.
    """
    try:
        return {"body": body.decode("utf-8")}
    except UnicodeDecodeError:
        return {"body": base64.b64encode(body).decode("ascii"), "encoding": "base64"}

