"""
A scripted HA instance for tests: it opens a vote connection to a
router's routing listener (docs/protocol.md, "Vote connections"),
authenticates as a mesh member, and sends the vote frames the test asks
for, keeping every answer.  Nothing in the router is built yet to play
this side; this is the wire as the witness expects it.
"""

from twisted.internet.protocol import Protocol

from meshroute.link import auth
from meshroute.wire.codec import FrameDecoder, encode
from meshroute.wire.frames import (
    Authenticate,
    Authenticated,
    Heartbeat,
    Reject,
    VoteHello,
    VoteRequest,
    Welcome,
)


class VoteCandidate(Protocol):
    """
    One vote connection, as router C{name} (an instance of it) to router
    C{witness}; with C{group}, the HA group its hello names (the pair's
    other instance checks it).

    @ivar answers: every frame received after authentication.
    @ivar rejected: the L{Reject} received, if any.
    @ivar lost: whether the connection is gone.
    """

    def __init__(self, name: str, witness: str, secret: bytes, lease_timeout_ms: int = 3000,
                 group: str = ""):
        self.name = name
        self.group = group
        self.witness = witness
        self.secret = secret
        self.lease_timeout_ms = lease_timeout_ms
        self.challenge = auth.new_challenge()
        self.peer_challenge = b""
        self.authenticated = False
        self.answers: list = []
        self.rejected: Reject | None = None
        self.lost = False
        self._decoder = FrameDecoder()

    def buildProtocol(self, addr) -> "VoteCandidate":
        """
        Be its own factory: the test holds the one protocol it dials with.
        """
        return self

    def connectionMade(self) -> None:
        self.transport.write(encode(VoteHello([3], self.name, self.group)))

    def dataReceived(self, data: bytes) -> None:
        for frame in self._decoder.feed(data):
            if isinstance(frame, Welcome):
                assert frame.router == self.witness
                self.peer_challenge = frame.challenge
                proof = auth.proof(self.secret, "connector", self.name, self.witness,
                                   self.challenge, self.peer_challenge)
                self.transport.write(encode(Authenticate(proof, self.challenge)))
            elif isinstance(frame, Authenticated):
                expected = auth.proof(self.secret, "listener", self.name, self.witness,
                                      self.challenge, self.peer_challenge)
                assert auth.verify(expected, frame.proof)
                self.authenticated = True
            elif isinstance(frame, Reject):
                self.rejected = frame
            else:
                self.answers.append(frame)

    def connectionLost(self, reason=None) -> None:
        self.lost = True

    def ask(self, group: str, candidate: str, epoch: int, position=(0, 0),
            alone: bool = True, requester: str | None = None) -> None:
        self.transport.write(encode(VoteRequest(
            group, candidate, requester or candidate, epoch, *position, alone,
            self.lease_timeout_ms)))

    def beat(self, group: str, instance: str, epoch: int, position=(0, 0),
             confirmed=(0, 0), sent_at: float = 0.0) -> None:
        self.transport.write(encode(Heartbeat(
            group, instance, epoch, *position, *confirmed, sent_at, self.lease_timeout_ms)))
