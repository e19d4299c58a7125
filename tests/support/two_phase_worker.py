"""
The transaction manager of the two-phase commit process test
(tests/processes/test_two_phase_processes.py), run as its own process
(C{python tests/support/two_phase_worker.py ...}) with the client API of
this checkout, as an application would run it.  Two transacted clients
of an HA pair, each listing both instances:

 - C{consumer} (C{--consumer} endpoints) consumes queue C{in} and prints
   C{delivered BODY REDELIVERED} for every delivery, for the whole run;
   once it has C{--acked} plus more messages, it prepares transaction
   C{a}: it acknowledges the first C{--acked} of them and sends
   C{--sends} messages C{a N} to C{out}.  It decides nothing itself.
 - C{manager} (C{--manager} endpoints) prepares transaction C{b} (sends
   C{b N} to C{out}), then waits for the file C{commit-b} in C{--control}
   and commits it: the test kills the active with that commit in flight,
   so it must fail with C{TransactionRetry} (printed C{retry b}), and
   C{tpc_commit(xid)} again completes it (C{committed b}).  Then, as a
   recovering transaction manager, it lists the prepared transactions
   (C{recovered [...]}) and commits C{a} by its xid (C{committed a}).

Progress lines: C{prepared a}, C{prepared b}, then the ones above.  Exits
0 once done, 1 on anything else (a commit that did not need a retry
included).
"""

import argparse
import os
import sys

from twisted.internet import defer, task

from meshroute.client import (
    ClientOptions,
    TransactionRetry,
    UnblockedError,
    Xid,
    connect,
)

XID_A = Xid(1, "tpc-test:a", "mq")
XID_B = Xid(1, "tpc-test:b", "mq")


def options() -> ClientOptions:
    return ClientOptions(reconnect_attempts=-1, initial_connect_attempts=-1,
                         retry_interval_ms=100, max_retry_interval_ms=100,
                         client_failure_check_period_ms=5000, transacted=True)


def say(line: str) -> None:
    print(line, flush=True)


def outcome_unknown(d: defer.Deferred) -> None:
    """
    A send of a prepared transaction whose session was lost: its outcome
    is the transaction's, which the manager decides.
    """
    d.addErrback(lambda failure: failure.trap(UnblockedError))


async def until_file(reactor, path: str) -> None:
    while not os.path.exists(path):
        await task.deferLater(reactor, 0.02, lambda: None)


async def prepare_a(reactor, args, consumer) -> None:
    got: list = []
    enough = defer.Deferred()

    def on_message(message) -> None:
        say(f"delivered {message.body.decode()} {message.redelivered}")
        got.append(message)
        if len(got) == args.acked + 1 and not enough.called:
            enough.callback(None)

    await consumer.subscribe("in", on_message, prefetch=10)
    await enough
    consumer.tpc_begin(XID_A)
    for message in got[:args.acked]:
        message.ack()
    for n in range(1, args.sends + 1):
        outcome_unknown(consumer.send("out", b"a %d" % n))
    await consumer.tpc_prepare()
    say("prepared a")


async def commit_b_across_the_failover(reactor, args, manager) -> None:
    manager.tpc_begin(XID_B)
    for n in range(1, args.sends + 1):
        outcome_unknown(manager.send("out", b"b %d" % n))
    await manager.tpc_prepare()
    say("prepared b")
    await until_file(reactor, os.path.join(args.control, "commit-b"))
    try:
        await manager.tpc_commit()
    except TransactionRetry:
        say("retry b")
    else:
        raise AssertionError("the commit of b did not need a retry")
    while True:
        try:
            await manager.tpc_commit(XID_B)
        except TransactionRetry:
            continue
        break
    say("committed b")


async def main(reactor, args) -> None:
    consumer = await connect(reactor, args.consumer, options())
    manager = await connect(reactor, args.manager, options())
    try:
        await prepare_a(reactor, args, consumer)
        await commit_b_across_the_failover(reactor, args, manager)
        recovered = await manager.tpc_recover()
        say(f"recovered {[list(xid) for xid in recovered]}")
        for xid in recovered:
            await manager.tpc_commit(xid)
        say("committed a")
        await until_file(reactor, os.path.join(args.control, "done"))
    finally:
        await manager.close()
        await consumer.close()


def run(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--consumer", action="append", required=True)
    parser.add_argument("--manager", action="append", required=True)
    parser.add_argument("--control", required=True)
    parser.add_argument("--acked", type=int, default=2)
    parser.add_argument("--sends", type=int, default=3)
    args = parser.parse_args(argv)
    task.react(lambda reactor: defer.ensureDeferred(main(reactor, args)))


if __name__ == "__main__":
    run(sys.argv[1:])
