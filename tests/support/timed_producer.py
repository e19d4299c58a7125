"""
A producer that times every send, for process tests that bound how long a
router makes a client wait.

    python tests/support/timed_producer.py --connect E [--connect E]... --to ADDRESS --stop-file PATH

It sends persistent messages one at a time (the next once the last is
confirmed, so each latency is the router's alone, not a queue in the
client) until C{PATH} exists, then exits 0.  For each confirmed send it
prints one JSON line, C{{"n", "id", "latency"}}: the message's number
(its body is C{message N}), the id the router gave it, and the seconds
between the send and its confirmation.  A send that fails ends it with
exit status 1 and the failure on stderr.
"""

import argparse
import json
import os
import sys
import time

from twisted.internet import defer, task

from meshroute.client import ClientOptions, connect


async def produce(reactor, args) -> None:
    client = await connect(reactor, args.connect, ClientOptions(client_id="timed-producer"))
    try:
        n = 0
        while not os.path.exists(args.stop_file):
            n += 1
            started = time.monotonic()
            try:
                msg_id = await client.send(args.to, f"message {n}".encode())
            except Exception as e:
                print(f"timed-producer: message {n} failed: {e!r}", file=sys.stderr, flush=True)
                raise SystemExit(1) from None
            print(json.dumps({"n": n, "id": msg_id, "latency": time.monotonic() - started}),
                  flush=True)
    finally:
        await client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connect", action="append", required=True)
    parser.add_argument("--to", required=True)
    parser.add_argument("--stop-file", required=True)
    args = parser.parse_args()
    task.react(lambda reactor: defer.ensureDeferred(produce(reactor, args)))


if __name__ == "__main__":
    main()
