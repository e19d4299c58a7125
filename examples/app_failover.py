"""
Application-level failover (docs/ha.md, "Application-level failover"):
a producer whose client never reconnects by itself.  It listens for the
failure, makes a fresh connection to the other endpoints of the HA pair,
and sends again, with the same duplicate ids, every message that was
not confirmed, so that each is enqueued exactly once.

Against the lab (`make lab`: router-c is an HA pair whose instances take
clients at 127.0.0.1:6103 and :6113; router-a is a plain router at 6101),
once the lab has played its scenario and keeps printing events:

    .venv/bin/python examples/app_failover.py \\
        --connect tcp:127.0.0.1:6103 --connect tcp:127.0.0.1:6113 \\
        --to orders@router-a --count 3000 --rate 200

While it sends, kill router-c's active instance (the primary, unless
`curl -s http://127.0.0.1:8103/api/v1/ha` says otherwise; then it is
router-c-backup.toml):

    pkill -KILL -f router-c-primary.toml

It prints the failure, the new connection and how many messages it sent
again.  router-a's consumer gets each message once:

    .venv/bin/meshroute receive --connect tcp:127.0.0.1:6101 --queue orders \\
        --count 3000 --json | wc -l

Against any pair, give both instances' client endpoints with --connect.
Exit status 0 once every message is confirmed; 1 if the router refused
one, or no instance took the session within --failover-timeout.
"""

import argparse
import sys
import uuid

from twisted.internet import defer, task
from twisted.internet.task import LoopingCall

from meshroute.client import DISCONNECT, ClientError, ClientOptions, SessionError, connect


def endpoints_after(endpoints, failed: str) -> list[str]:
    """
    C{endpoints} in the order to try after C{failed} failed: the ones
    after it first (for a pair: the other instance), C{failed} last (it
    may be the one that is active again by then).
    """
    i = endpoints.index(failed) + 1
    return list(endpoints[i:]) + list(endpoints[:i])


class FailoverProducer:
    """
    Sends messages 1 to C{count} to one address, message N with the body
    C{message N} and the duplicate id C{PREFIX N}, through one client at
    a time.  When a client's connection fails, every send in flight fails
    with L{meshroute.client.UnblockedError}: the router may or may not
    have the message.  Those stay in L{unconfirmed} and are sent again
    through the next client: the router enqueues a duplicate id at most
    once, and answers a repeat with the first message's id.

    @ivar unconfirmed: the numbers of the messages sent and not confirmed.
    @ivar sent_again: how many sends repeated an unconfirmed message.
    @ivar failovers: how many fresh connections followed a failure.
    """

    def __init__(self, reactor, args: argparse.Namespace, out=sys.stdout) -> None:
        self._reactor = reactor
        self._args = args
        self._out = out
        self._started = self._reactor.seconds()
        self._next = 1
        self.confirmed = 0
        self.unconfirmed: set[int] = set()
        self.sent_again = 0
        self.failovers = 0
        self.refused: ClientError | None = None

    def say(self, text: str) -> None:
        elapsed = self._reactor.seconds() - self._started
        print(f"{elapsed:7.2f} s  {text}", file=self._out, flush=True)

    def progress(self) -> None:
        self.say(f"sent {self._next - 1}, confirmed {self.confirmed}, "
                 f"unconfirmed {len(self.unconfirmed)}")

    def options(self) -> ClientOptions:
        """
        No reconnection (C{reconnect_attempts=0}, the default): a failure
        ends the client at once, and this producer decides what comes
        next.  The first connection goes round the endpoints until one
        takes the session (the instance that is not active refuses with
        C{not-active}; during a failover neither is active for a while),
        bounded by C{--failover-timeout} instead of a count.
        """
        return ClientOptions(client_id="app-failover",
                             reconnect_attempts=0, initial_connect_attempts=-1,
                             retry_interval_ms=self._args.retry_interval,
                             max_retry_interval_ms=self._args.retry_interval,
                             client_failure_check_period_ms=self._args.failure_check_period)

    @property
    def done(self) -> bool:
        "Every message was sent and confirmed."
        return self._next > self._args.count and not self.unconfirmed

    async def run(self) -> int:
        """
        @return: the exit status.
        """
        endpoints = list(self._args.connect)
        ticker = LoopingCall(self.progress)
        ticker.clock = self._reactor
        ticker.start(self._args.progress, now=False)
        try:
            while True:
                client = await self.connect(endpoints)
                if client is None:
                    return 1
                failed = await self.send_through(client)
                if failed is not None:
                    self.say(f"DISCONNECT: the connection to {client.router} at "
                             f"{client.endpoint} failed ({failed}); "
                             f"{len(self.unconfirmed)} messages unconfirmed")
                if self.refused is not None:
                    await client.close()
                    self.say(f"the router refused a message: {self.refused}")
                    return 1
                if self.done:
                    await client.close()
                    self.say(f"done: {self.confirmed} of {self._args.count} messages "
                             f"confirmed; {self.failovers} failover(s); "
                             f"{self.sent_again} sent again")
                    return 0
                self.failovers += 1
                endpoints = endpoints_after(client.endpoints, client.endpoint)
        finally:
            ticker.stop()

    async def connect(self, endpoints: list[str]):
        """
        A new client, through the first of C{endpoints} that takes the
        session; None if none did within C{--failover-timeout}.
        """
        self.say(f"connecting to {', '.join(endpoints)}")
        began = self._reactor.seconds()
        attempt = connect(self._reactor, endpoints, self.options())
        # Cancelling connect() gives up its attempts (it then fails with
        # SessionError, code "closed").
        timeout = self._args.failover_timeout
        timer = self._reactor.callLater(timeout, attempt.cancel)
        try:
            client = await attempt
        except ClientError as e:
            why = str(e) if timer.active() else f"none within {timeout:g} s"
            self.say(f"no instance took the session: {why}")
            return None
        finally:
            if timer.active():
                timer.cancel()
        self.say(f"connected to {client.router} at {client.endpoint} "
                 f"in {self._reactor.seconds() - began:.2f} s")
        return client

    async def send_through(self, client) -> SessionError | None:
        """
        Send the unconfirmed messages again, then the next ones at the
        rate asked for, until all are confirmed or the connection fails.

        @return: why the connection failed (None if it did not).
        """
        lost: list[str] = []
        # The failure listener (JMS' ExceptionListener): with no
        # reconnection the only event is DISCONNECT, heard as the client
        # gives up, before the calls in flight fail with UnblockedError.
        client.add_failure_listener(lost.append)
        sends = []
        again = sorted(self.unconfirmed)
        if again:
            self.say(f"sending {len(again)} unconfirmed messages again, with their duplicate ids")
            self.sent_again += len(again)
        for n in again:
            sends.append(self.send(client, n))
        while self._next <= self._args.count and not lost and self.refused is None:
            sends.append(self.send(client, self._next))
            self._next += 1
            await task.deferLater(self._reactor, 1 / self._args.rate)
        await defer.DeferredList(sends)
        if DISCONNECT not in lost:
            return None
        # when_closed() fails with why the session ended, once every call
        # in flight has failed.
        try:
            await client.when_closed()
        except SessionError as e:
            return e
        return None

    def send(self, client, n: int) -> defer.Deferred:
        self.unconfirmed.add(n)
        d = client.send(self._args.to, f"message {n}".encode(),
                        duplicate_id=f"{self._args.prefix}{n}")
        d.addCallbacks(self._confirmed, self._not_confirmed, callbackArgs=(n,),
                       errbackArgs=(n,))
        return d

    def _confirmed(self, msg_id: str, n: int) -> None:
        self.unconfirmed.discard(n)
        self.confirmed += 1

    def _not_confirmed(self, failure, n: int) -> None:
        # SessionError (UnblockedError included): the session ended with
        # the send in flight, or before it: message n stays unconfirmed,
        # for the next client.  Anything else is the router's refusal.
        if not failure.check(SessionError):
            self.refused = self.refused or failure.value


def arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Send persistent messages through an HA pair, failing over by hand.")
    parser.add_argument("--connect", action="append", required=True, metavar="ENDPOINT",
                        help="a client endpoint of the pair (give each instance's)")
    parser.add_argument("--to", required=True, help="QUEUE@ROUTER, or QUEUE of the pair")
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=200.0, help="messages per second")
    parser.add_argument("--prefix", default=f"app-failover-{uuid.uuid4().hex[:8]}-",
                        help="duplicate id prefix (default: new for each run, as a run "
                        "with a prefix already used would enqueue nothing)")
    parser.add_argument("--retry-interval", type=int, default=200, metavar="MS",
                        help="the wait between rounds over the endpoints")
    parser.add_argument("--failover-timeout", type=float, default=30.0, metavar="SECONDS",
                        help="how long to look for an instance that takes the session")
    parser.add_argument("--failure-check-period", type=int, default=5000, metavar="MS",
                        help="a connection silent this long is failed (a frozen router)")
    parser.add_argument("--progress", type=float, default=1.0, metavar="SECONDS",
                        help="print the counts this often")
    args = parser.parse_args(argv)
    if args.count < 1 or not args.rate > 0 or not args.progress > 0:
        parser.error("--count, --rate and --progress must be positive")
    return args


async def main(reactor, argv: list[str]) -> int:
    return await FailoverProducer(reactor, arguments(argv)).run()


if __name__ == "__main__":
    def _run(reactor):
        return defer.ensureDeferred(main(reactor, sys.argv[1:])).addCallback(sys.exit)

    task.react(_run)
