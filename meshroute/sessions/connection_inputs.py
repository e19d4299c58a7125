"""
Everything that can happen to a client connection, whatever its protocol:
the inputs of the connection machine (L{meshroute.sessions.lifecycle}),
named for events, each with what it means.

The connection's core (L{meshroute.sessions.connection_core}) is handed
these inputs to feed its verdicts back (C{accepted}, C{refused},
C{challenged}), and the machine's transition table is written over them;
both read them from here, beneath either.
"""

from typing import Protocol


class ConnectionInputs(Protocol):
    """
    Everything that can happen to a client connection.
    """

    def got_hello(self, frame) -> None:
        "The client's opening frame: it asks for a session (native Open, STOMP CONNECT)."

    def accepted(self, hello) -> None:
        "The client may have the session C{hello} asks for."

    def refused(self, code: str, detail: str) -> None:
        "The hello, or the authentication, is not acceptable; C{code} says why."

    def authentication_needed(self) -> None:
        "The hello is acceptable once the client authenticates (the mechanisms were offered)."

    def got_authenticate(self, frame) -> None:
        "The client chose a mechanism."

    def challenged(self) -> None:
        "The mechanism needs the client's response (a challenge was sent)."

    def got_auth_response(self, frame) -> None:
        "The client answered the challenge."

    def got_frame(self, frame) -> None:
        "A frame of the session's business (commands, acknowledgements, pings)."

    def got_goodbye(self, frame) -> None:
        "The client ends its session and will send nothing more (STOMP DISCONNECT)."

    def session_ended(self) -> None:
        "The session wrote Closed: the connection's work is done."

    def taken_over(self) -> None:
        "Another connection resumed this connection's session."

    def user_removed(self) -> None:
        "A reload removed the connection's user."

    def protocol_error(self, code: str, detail: str) -> None:
        """
        The client sent bytes that are not a frame (C{protocol-error}), a
        frame not allowed now (C{bad-command}), or (STOMP, which has no
        error of one command) a command that failed.
        """

    def over_limit(self, detail: str) -> None:
        """
        The client passed a bound of its listener
        (L{meshroute.sessions.limits}): too many connections, or headers
        beyond the bounds.
        """

    def handshake_expired(self) -> None:
        "The connection has had no session for the listener's stage-valid-timeout."

    def ttl_expired(self) -> None:
        "The client sent no whole frame (nor a heart-beat) for the connection's TTL."

    def frame_overdue(self) -> None:
        "The client began a frame longer than PARTIAL_FRAME_TIMEOUT_S ago and has not finished it."

    def buffers_full(self) -> None:
        "The partial frame the client is sending would pass the listener's buffer bound."

    def stopped_serving(self) -> None:
        "The router, an HA instance's, stops serving: another instance takes over."

    def router_stopped(self) -> None:
        """
        The router shuts down: the client must go elsewhere, not wait for
        answers that will never come.  (An HA instance's router that stops
        being the active one sends its clients away instead:
        C{stopped_serving}.)
        """

    def connection_lost(self) -> None:
        "The transport is closed."
