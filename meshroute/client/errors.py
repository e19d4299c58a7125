"""
The errors of the client API, and the codes the client itself gives them.

Every error a call fails with is a L{ClientError} carrying a stable
C{code}: one of the router's (docs/client-protocol.md, "Errors") or one of
the client's own below.
"""

from meshroute.errors import MeshrouteError

#: The connection was lost, refused or could not be made.
CONNECTION_LOST = "connection-lost"
#: The router did not answer Open in time.
TIMEOUT = "timeout"
#: The client was closed (by the application) before the call.
CLOSED = "closed"
#: A call in progress when the session failed, whose outcome is unknown:
#: the session could not be resumed (it was recreated, or the client gave
#: up reconnecting, or was closed meanwhile).
UNBLOCKED = "unblocked"
#: The message cannot fit in one client frame (nothing was sent).
TOO_LARGE = "too-large"
#: The call asks for what the router's protocol version cannot carry (a
#: time to live needs version 6, two-phase commit 7, topics 8; nothing
#: was sent): L{unsupported}.
UNSUPPORTED = "unsupported"
#: commit() or rollback() on a client not made with C{transacted=True}.
NOT_TRANSACTED = "not-transacted"
#: The router serves an older epoch than the client has seen from its pair:
#: a stale instance, which the client refused.
STALE_EPOCH = "stale-epoch"
#: A two-phase commit call that does not fit the client's transaction
#: state (PEP 249's ProgrammingError): C{tpc_begin()} inside a transaction
#: or while a prepared one awaits C{tpc_commit()}/C{tpc_rollback()}, a
#: send meanwhile, C{tpc_prepare()} without C{tpc_begin()}, C{commit()}
#: inside a two-phase transaction.
TRANSACTION_STATE = "transaction-state"
#: XA's XA_RETRY: a commit or rollback by xid was in progress when its
#: session was lost: call it again (L{TransactionRetry}).
RETRY = "retry"


class ClientError(MeshrouteError):
    """
    Root of the errors of this API.

    @ivar code: a stable code: one of the router's (docs/client-protocol.md)
        or C{connection-lost}, C{timeout}, C{closed}, C{unblocked},
        C{too-large}, C{not-transacted}, C{stale-epoch},
        C{transaction-state}, C{retry}.
    @ivar detail: human-readable explanation.
    """

    def __init__(self, code: str, detail: str = "") -> None:
        super().__init__(f"{code}: {detail}" if detail else code)
        self.code = code
        self.detail = detail


class SendError(ClientError):
    """
    The router refused a message.
    """


class SubscribeError(ClientError):
    """
    The router refused a subscription (or an unsubscription).
    """


class SessionError(ClientError):
    """
    The session ended before the call could be made: the connection was
    lost or refused and not recovered, the router closed it for an error,
    or the client was closed.
    """


class UnblockedError(SessionError):
    """
    The call was in progress when the session failed and could not be
    resumed, so whether the router carried it out is unknown (Artemis'
    "unblocked" exception).  Code C{unblocked}.

    A send that fails with it may be retried safely when it carries a
    duplicate id: the router enqueues a duplicate id at most once.
    """

    def __init__(self, detail: str = "") -> None:
        super().__init__(UNBLOCKED, detail)


class TransactionRolledBack(ClientError):
    """
    The transaction was rolled back instead of committed: nothing of it
    was done.  From C{commit()} when the router refused the commit (its
    code: C{rolled-back}, or the code of a send it refused) or when the
    session the transaction's work was held in was lost (it was then
    rollback-only); from a send of a transaction rolled back.
    """


class TransactionOutcomeUnknown(UnblockedError):
    """
    A commit was in progress when the session failed and could not be
    resumed: whether the router committed it is unknown.  Retrying the
    transaction with the same duplicate ids on its sends applies it
    exactly once.
    """


class TransactionRetry(TransactionOutcomeUnknown):
    """
    XA's XA_RETRY (the JBoss EAP HA chapter's rule for a commit unblocked
    by failover): a C{tpc_commit} or C{tpc_rollback} was in progress when
    its session was lost, so whether the router carried it out is
    unknown, and the transaction manager must call it again, by xid, once
    the client is connected (to the instance that took over, say): a
    prepared transaction not yet decided is decided then, exactly once;
    one committed already is answered as committed
    (docs/client-protocol.md, "Two-phase commit").  Code C{retry}.
    """

    def __init__(self, detail: str = "") -> None:
        ClientError.__init__(self, RETRY, detail)


class TransactionStateError(ClientError):
    """
    A two-phase commit call, or a send, that the client's transaction
    state does not allow (PEP 249's ProgrammingError): nothing was sent.
    Code C{transaction-state}.
    """

    def __init__(self, detail: str) -> None:
        super().__init__(TRANSACTION_STATE, detail)


class UnknownTransaction(ClientError):
    """
    The router holds no prepared transaction of that xid, and committed
    none within its duplicate-id window (XA's XAER_NOTA; code
    C{unknown-xid}): it was never prepared there, or it was rolled back.
    """


class HeuristicOutcome(ClientError):
    """
    The router could not carry out the outcome asked for, in full (XA's
    heuristic outcomes), and says which it was: code C{heuristic-mixed}
    (carried out, but some of the messages the transaction acknowledged
    were no longer held), or C{heuristic-commit} (a rollback of a
    transaction that was committed).  The router logged it and wrote a
    C{transaction.heuristic} event.
    """


def unsupported(version: int, needed: int, what: str,
                error: type[ClientError] = ClientError) -> ClientError | None:
    """
    The C{error} (code L{UNSUPPORTED}) of a call asking for C{what}, which
    needs client protocol version C{needed}, of a router known to speak
    C{version} (0: not known yet, and nothing is refused); None when it
    speaks C{needed} or later.
    """
    if 0 < version < needed:
        return error(UNSUPPORTED, f"the router speaks client protocol version {version}; "
                                  f"{what} needs version {needed}")
    return None
