"""
The client's side of a version-5 SCRAM exchange, frame by frame, for
tests that speak the client protocol themselves (to a factory in memory,
or to a router process over a socket).
"""

from meshroute.wire import client_frames as f
from meshroute.security.scram import MECHANISM, ScramClient


def scram_open(connection, user: str, password: str, session_id: str = "",
               versions=(1, 2, 3, 4, 5)) -> list:
    """
    Send Open on C{connection} and authenticate as C{user}: its C{send(*frames)}
    writes frames, its C{expect()} returns the router's next frame.

    @return: C{[Authenticated, Opened]}, with the router's proof checked;
        or the router's refusal alone, C{[Error]}.
    """
    connection.send(f.Open(list(versions), "c", session_id, 60000))
    mechanisms = connection.expect()
    assert isinstance(mechanisms, f.Mechanisms), mechanisms
    client = ScramClient(user, password)
    connection.send(f.Authenticate(MECHANISM, client.first()))
    challenge = connection.expect()
    assert isinstance(challenge, f.Challenge), challenge
    connection.send(f.AuthResponse(client.final(challenge.data)))
    answer = connection.expect()
    if not isinstance(answer, f.Authenticated):
        return [answer]
    client.verify(answer.data)
    return [answer, connection.expect()]
