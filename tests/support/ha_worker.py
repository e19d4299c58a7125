"""
Client workers for the HA process tests, run as their own processes
(C{python tests/support/ha_worker.py MODE ...}) with the client API of this
checkout, as an application would run them:

 - C{produce}: sends persistent messages with duplicate ids, one at a
   time at a steady pace, so that a test can kill routers while it
   sends; a send that a failover interrupted (C{UnblockedError}) is sent
   again with its duplicate id.  Prints C{confirmed N} for each message
   the router confirmed; with C{--until FILE}, it stops sending once FILE
   exists.
 - C{transact-produce}: the same, in transactions of C{--batch} sends
   (C{transacted=True}): a transaction the failover rolled back
   (C{TransactionRolledBack}) or left unknown (C{TransactionOutcomeUnknown})
   is sent again whole, with the same duplicate ids.  Prints C{committed N}
   for each message of a committed transaction.
 - C{transact-relay}: consumes a queue and, for each message, sends one
   message on and acknowledges the one it got in one transaction; the
   message sent on carries a duplicate id made from the one it got, so a
   transaction done again after an unknown outcome enqueues nothing twice.
   Prints C{relayed N} per committed transaction (the body's number).

Each exits 0 once done (the relay: once it relayed C{--count} messages),
1 on any other error.
"""

import argparse
import os
import sys

from twisted.internet import defer, task

from meshroute.client import (
    ClientOptions,
    TransactionOutcomeUnknown,
    TransactionRolledBack,
    UnblockedError,
    connect,
)

#: What a failover makes a call fail with: the work is done again.
RETRYABLE = (UnblockedError, TransactionRolledBack, TransactionOutcomeUnknown)

def options(transacted: bool) -> ClientOptions:
    return ClientOptions(reconnect_attempts=-1, initial_connect_attempts=-1,
                         retry_interval_ms=100, max_retry_interval_ms=100,
                         client_failure_check_period_ms=2000, transacted=transacted)


def say(line: str) -> None:
    print(line, flush=True)


async def produce(reactor, args) -> None:
    client = await connect(reactor, args.connect, options(transacted=False))
    try:
        for n in range(1, args.count + 1):
            if args.until and os.path.exists(args.until):
                break
            while True:
                try:
                    await client.send(args.to, b"message %d" % n,
                                      duplicate_id=f"{args.prefix}{n}")
                except UnblockedError:
                    continue
                break
            say(f"confirmed {n}")
            await task.deferLater(reactor, args.pace, lambda: None)
    finally:
        await client.close()


async def transact_produce(reactor, args) -> None:
    client = await connect(reactor, args.connect, options(transacted=True))
    try:
        for first in range(1, args.count + 1, args.batch):
            numbers = range(first, min(first + args.batch, args.count + 1))
            while True:
                sends = [client.send(args.to, b"message %d" % n,
                                     duplicate_id=f"{args.prefix}{n}") for n in numbers]
                try:
                    await client.commit()
                    for d in sends:
                        await d
                except RETRYABLE:
                    for d in sends:
                        d.addErrback(lambda _: None)
                    continue
                break
            for n in numbers:
                say(f"committed {n}")
            await task.deferLater(reactor, args.pace, lambda: None)
    finally:
        await client.close()


async def transact_relay(reactor, args) -> None:
    client = await connect(reactor, args.connect, options(transacted=True))
    relayed: set[bytes] = set()
    work: defer.DeferredQueue = defer.DeferredQueue()
    try:
        await client.subscribe(args.queue, work.put, prefetch=1)
        while len(relayed) < args.count:
            message = await work.get()
            sent = client.send(args.to, message.body,
                               duplicate_id=f"{args.prefix}{message.body.decode()}")
            message.ack()
            try:
                await client.commit()
                await sent
            except RETRYABLE:
                # Rolled back or unknown: the message comes again if the
                # commit did not happen, and is then relayed again (its
                # duplicate id makes that harmless if it did).
                sent.addErrback(lambda _: None)
                continue
            relayed.add(message.body)
            say(f"relayed {message.body.decode().split()[-1]}")
    finally:
        await client.close()


MODES = {"produce": produce, "transact-produce": transact_produce,
         "transact-relay": transact_relay}


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=sorted(MODES))
    parser.add_argument("--connect", action="append", required=True)
    parser.add_argument("--to", required=True)
    parser.add_argument("--queue")
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--prefix", default="w-")
    parser.add_argument("--batch", type=int, default=5)
    parser.add_argument("--pace", type=float, default=0.005)
    parser.add_argument("--until")
    args = parser.parse_args(argv)
    task.react(lambda reactor: defer.ensureDeferred(MODES[args.mode](reactor, args)))


if __name__ == "__main__":
    main(sys.argv[1:])
