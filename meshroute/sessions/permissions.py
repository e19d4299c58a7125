"""
What one authenticated user's session may do at the router it is
connected to: send to an address, publish to a topic (a send to
C{topic:NAME}, judged by the user's C{publish} patterns, not its C{send}
ones), consume from a local queue, subscribe to topics with a pattern,
resume a session.  Every refusal is answered C{not-allowed}, logged, emitted as a
C{security.denied} event (the audit counts them per user), and never
names a password or proof.

The check sits on the producer's path (every Send, every message of a
SendBatch), so a L{Guard} remembers its answers per address as long as
the policy in force is the same object (a reload replaces it whole): a
send costs a dictionary lookup once its address was seen.
"""

from dataclasses import dataclass, field

from twisted.logger import Logger

from meshroute import events as event_names
from meshroute.errors import MeshrouteError
from meshroute.messages import TOPIC_PREFIX, AddressError, parse_address
from meshroute.topics.patterns import BadTopic

log = Logger()

#: The C{action} of a C{security.denied} event.
CONNECT = "connect"
SEND = "send"
PUBLISH = "publish"
CONSUME = "consume"
SUBSCRIBE = "subscribe"
RESUME = "resume"

#: Addresses whose answers one guard remembers: a client cycling through
#: names must not grow the router's memory.
_REMEMBERED = 1024


class NotAllowed(MeshrouteError):
    """
    The user may not do this (the C{not-allowed} error code).
    """

    code = "not-allowed"


def denied(events, user: str, action: str, target: str, reason: str) -> None:
    """
    Record a refusal: the log, and a C{security.denied} event.
    """
    log.warn("client user {user!r} refused {action} {target!r}: {reason}", user=user,
             action=action, target=target, reason=reason)
    events.emit(event_names.SECURITY_DENIED, user=user, action=action, target=target,
                reason=reason)


@dataclass(eq=False)
class Guard:
    """
    The permission checks of one user's session.

    @ivar security: the router's L{meshroute.security.policy.Security}
        (its policy is the one in force now, reloads included).
    @ivar user: the user the session belongs to.
    @ivar router: this router's name, which qualifies bare addresses.
    @ivar events: where C{security.denied} goes.
    """

    security: object
    user: str
    router: str
    events: object
    _policy: object = None
    _sends: dict = field(default_factory=dict)

    def may_send(self, address: str) -> bool:
        """
        Whether the user may send to C{address} (bare, C{queue@router}, or
        a topic's C{topic:NAME}: publish); a refusal is recorded.  A
        malformed address passes: the engine refuses it as
        C{bad-address}.
        """
        policy = self.security.policy
        if policy is not self._policy:
            self._policy, self._sends = policy, {}
        answer = self._sends.get(address)
        if answer is None:
            answer = self._decide_send(policy, address)
            if len(self._sends) >= _REMEMBERED:
                self._sends.clear()
            self._sends[address] = answer
        if not answer:
            if address.startswith(TOPIC_PREFIX):
                denied(self.events, self.user, PUBLISH, address[len(TOPIC_PREFIX):],
                       "no permission publishes to it")
            else:
                denied(self.events, self.user, SEND, address, "no permission sends there")
        return answer

    def _decide_send(self, policy, address: str) -> bool:
        """
        The policy's answer for a send to C{address}; True when the
        address is malformed.
        """
        try:
            if address.startswith(TOPIC_PREFIX):
                return policy.may_publish(self.user, address[len(TOPIC_PREFIX):])
            queue, router = parse_address(address, self.router)
        except (AddressError, BadTopic):
            return True
        return policy.may_send(self.user, f"{queue}@{router}")

    def may_consume(self, queue: str) -> bool:
        """
        Whether the user may consume from the local queue C{queue}; a
        refusal is recorded.
        """
        if self.security.policy.may_consume(self.user, queue):
            return True
        denied(self.events, self.user, CONSUME, queue, "no permission consumes from it")
        return False

    def may_subscribe(self, pattern: str) -> bool:
        """
        Whether the user may subscribe to topics with C{pattern}: every
        topic it can match is one the user may subscribe to; a refusal is
        recorded.  A malformed pattern passes: the router refuses it as
        C{bad-address}.
        """
        try:
            if self.security.policy.may_subscribe(self.user, pattern):
                return True
        except BadTopic:
            return True
        denied(self.events, self.user, SUBSCRIBE, pattern,
               "its subscribe patterns do not cover it")
        return False

    def refusal(self, what: str) -> str:
        """
        The detail of a C{not-allowed} answer.
        """
        return f"user {self.user!r} may not {what}"

    def send_refusal(self, address: str) -> str:
        """
        The detail of a C{not-allowed} answer to a send to C{address}.
        """
        if address.startswith(TOPIC_PREFIX):
            return self.refusal(f"publish to {address[len(TOPIC_PREFIX):]!r}")
        return self.refusal(f"send to {address!r}")
