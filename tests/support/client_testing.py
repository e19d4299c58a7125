"""
Helpers shared by the client API's tests: reading a fired Deferred,
keeping the clients a test makes from being reported as forgotten, and
running the C{meshroute} command, in memory or as a process.  The routers they connect
to are in L{fake_router}.
"""

import io
import os
import sys

import pytest
from twisted.internet import reactor
from twisted.internet.defer import Deferred, ensureDeferred
from twisted.internet.utils import getProcessOutputAndValue

from meshroute import cli
from meshroute.client import Client


def result_of(d: Deferred):
    """
    The result of a fired Deferred (raising its failure), leaving the
    result in place.
    """
    results = []

    def keep(result):
        results.append(result)
        return result

    d.addBoth(keep)
    assert results, "the Deferred has not fired"
    result = results[0]
    if hasattr(result, "raiseException"):
        d.addErrback(lambda failure: None)
        result.raiseException()
    return result


def failure_of(d: Deferred):
    """
    The exception a fired Deferred failed with (the failure is handled).
    """
    results = []
    d.addBoth(results.append)
    assert results, "the Deferred has not fired"
    assert hasattr(results[0], "raiseException"), f"succeeded with {results[0]!r}"
    return results[0].value


@pytest.fixture(autouse=True)
def kept_clients(monkeypatch):
    """
    Every client a test makes, kept until the end of the test and then
    made unable to warn: clients a test leaves open are not forgotten ones
    (which would fail their calls in whichever later test the garbage
    collector runs).  The forgotten-client tests empty this list.
    """
    made = []
    original = Client.__init__

    def init(self, core):
        original(self, core)
        made.append(self)

    monkeypatch.setattr(Client, "__init__", init)
    yield made
    for client in made:
        client._finalizer.detach()


def meshroute_command(*args):
    """
    Run C{python -m meshroute.cli ARGS}; fires with (out, err, status).
    """
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    return getProcessOutputAndValue(sys.executable, ["-m", "meshroute.cli", *args], env=env,
                                    reactor=reactor)


def parse_command(argv):
    """
    The options of C{meshroute ARGV}'s command.
    """
    options = cli.Options()
    options.parseOptions(argv)
    return options.subOptions


def run_command(command, harness, argv):
    """
    Run C{command} (C{run_send}, C{run_receive}) with C{meshroute ARGV}'s
    options on C{harness}'s clock and connections; returns its Deferred
    (firing with the exit status) and what it writes to stdout and
    stderr.
    """
    out, err = io.StringIO(), io.StringIO()
    d = ensureDeferred(command(harness.clock, parse_command(argv), out, err,
                               connect=harness.connect_for_cli))
    return d, out, err
