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
#: The send asks for what the router's protocol version cannot carry (a
#: time to live needs version 6; nothing was sent).
UNSUPPORTED = "unsupported"
#: commit() or rollback() on a client not made with C{transacted=True}.
NOT_TRANSACTED = "not-transacted"
#: The router serves an older epoch than the client has seen from its pair:
#: a stale instance, which the client refused.
STALE_EPOCH = "stale-epoch"


class ClientError(MeshrouteError):
    """
    Root of the errors of this API.

    @ivar code: a stable code: one of the router's (docs/client-protocol.md)
        or C{connection-lost}, C{timeout}, C{closed}, C{unblocked},
        C{too-large}, C{not-transacted}, C{stale-epoch}.
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
