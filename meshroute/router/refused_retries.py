"""
A send the mesh would refuse now (L{meshroute.router.admission}) may be
the retry of one accepted before, whose answer a lost connection
swallowed: when its duplicate id was accepted, it is answered with the
first message's id (and C{message.duplicate}, reason C{duplicate-id}),
whatever the mesh's state now; otherwise it is refused.  A producer that
retries with the same id so never sees a refusal for a message the mesh
has.

Acceptance (L{meshroute.router.acceptance}) asks here for each refused
send that carries a duplicate id: one alone (L{RefusedRetries.answer}),
those of a batch repeating the id of a send stored earlier in the same
batch, whose transaction the store has not written yet
(L{RefusedRetries.answer_repeats}), and those of a transaction, which
are refused together (L{RefusedRetries.check}).
"""

from twisted.internet.defer import Deferred, gatherResults
from twisted.python.failure import Failure

from meshroute.errors import MeshrouteError


class RefusedRetries:
    """
    The answers to refused sends with a duplicate id.

    @param store: the router's store, whose C{duplicate_of(duplicate_id)}
        fires with the first message's id, or None.
    @param message_events: L{meshroute.router.message_events.MessageEvents},
        where a duplicate send is recorded.
    """

    def __init__(self, store, message_events) -> None:
        self._store = store
        self._events = message_events

    def answer(self, refusal: MeshrouteError, duplicate_id: str, dest: str) -> Deferred:
        """
        The answer to a send to C{dest} refused for C{refusal}: Deferred
        firing with the first message's id if C{duplicate_id} was accepted
        before, else failing with C{refusal}.
        """
        d = self._store.duplicate_of(duplicate_id)

        def answer(original: str | None):
            if original is None:
                return Failure(refusal)
            self._events.duplicate_send(original, dest, duplicate_id)
            return original

        d.addCallback(answer)
        return d

    def answer_repeats(self, repeats: list, outcomes: list) -> None:
        """
        Answer the refused sends of a batch that repeat the duplicate id of
        a send stored before them in it, as L{answer} would after that
        send: with its message id once it is accepted.  C{repeats} are
        C{(position, first, refusal, dest, duplicate_id)}: the send's
        position in C{outcomes}, and that of the first send of its id.
        """
        for position, first, refusal, dest, duplicate_id in repeats:
            original = outcomes[first]
            if type(original) is str:
                self._events.duplicate_send(original, dest, duplicate_id)
                outcomes[position] = original
            else:
                outcomes[position] = Failure(refusal)

    def check(self, refused: list) -> Deferred:
        """
        Whether a transaction whose sends C{refused}, C{(refusal,
        duplicate_id)} pairs, were all accepted before (it is the retry of
        one that was applied): Deferred firing with None if so, else
        failing with the first refusal whose id was not (or the store's
        error).
        """
        d = gatherResults([self._store.duplicate_of(duplicate_id)
                           for _refusal, duplicate_id in refused], consumeErrors=True)

        def decided(originals):
            for (refusal, _duplicate_id), original in zip(refused, originals):
                if original is None:
                    return Failure(refusal)
            return None

        d.addCallbacks(decided, lambda failure: failure.value.subFailure)
        return d
