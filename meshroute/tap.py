"""
The twistd plugin's body: C{twistd -n meshroute --config FILE}.
"""

import gc
import signal

from twisted.application.service import MultiService
from twisted.logger import Logger
from twisted.python import usage

from meshroute.config import config_warnings, load_config
from meshroute.errors import ConfigError
from meshroute.security.load import load_policy

log = Logger()


class Options(usage.Options):
    """
    Command-line options of C{twistd meshroute}.
    """

    synopsis = "--config FILE"
    optParameters = [["config", "c", None, "The router's TOML configuration file."]]

    def postOptions(self) -> None:
        """
        Load and validate the configuration now, with the files of the
        instances it hosts (C{[[ha.colocated]]}), so that a bad file stops
        twistd with a message naming the file and key, before anything
        runs.  Their warnings go to the log (buffered until twistd's log
        starts).  The users files are checked too, so that an HA instance,
        whose router reads its users only once active, refuses them at
        start as well.
        """
        if not self["config"]:
            raise usage.UsageError("--config FILE is required")
        try:
            self["router-config"] = load_config(self["config"])
            for config in (self["router-config"], *self["router-config"].colocated):
                if config.security is not None:
                    load_policy(config)
        except ConfigError as e:
            raise usage.UsageError(str(e)) from None
        for config in (self["router-config"], *self["router-config"].colocated):
            for warning in config_warnings(config):
                log.warn("configuration warning: {warning}", warning=warning)


def makeService(options: Options, reactor=None):
    """
    Build the process's service tree on C{reactor} (the global one by
    default): its configuration's router, or instance of an HA pair
    (either policy), and the HA instances it hosts
    (L{meshroute.process.ProcessService}).
    """
    # twistd imports this module to list its plugins (C{twistd --help});
    # the router is loaded only when a router is built.
    from meshroute.process import ProcessService

    if reactor is None:
        from twisted.internet import reactor
    try:
        instances = ProcessService(options["router-config"], reactor)
    except ConfigError as e:
        raise SystemExit(f"meshroute: {e}") from None
    reactor.callWhenRunning(_stop_cleanly_on_signals, reactor)
    # What start-up allocated (modules, configuration) lives as long as the
    # process: keep it out of later garbage-collection passes, whose first
    # full pass otherwise stalls the router for tens of milliseconds.
    reactor.callWhenRunning(gc.freeze)
    return _UnderTwistd(instances, reactor)


class _UnderTwistd(MultiService):
    """
    The process's instances as twistd runs them: a listener that cannot
    bind its port ends the process with one line naming the file and the
    key (and a non-zero status), not with a traceback; and SIGHUP, while
    it runs, reloads the users and permissions of every instance
    (L{meshroute.security.reload}).

    @param instances: a L{meshroute.process.ProcessService}.
    """

    def __init__(self, instances, reactor) -> None:
        super().__init__()
        instances.setServiceParent(self)
        self._instances = instances
        self._reactor = reactor
        self._previous_sighup = None

    def startService(self) -> None:
        """
        Reload on SIGHUP from now on.  The handler only schedules the
        reload on the reactor (C{callFromThread} is safe in a signal
        handler), so the reload never runs in the middle of other code.
        """
        super().startService()
        self._previous_sighup = signal.signal(
            signal.SIGHUP,
            lambda signum, frame: self._reactor.callFromThread(self._instances.reload_security))

    def stopService(self):
        if self._previous_sighup is not None:
            signal.signal(signal.SIGHUP, self._previous_sighup)
            self._previous_sighup = None
        return super().stopService()

    def privilegedStartService(self) -> None:
        try:
            super().privilegedStartService()
        except ConfigError as e:
            raise SystemExit(f"meshroute: {e}") from None


def _stop_cleanly_on_signals(reactor) -> None:
    """
    Make SIGTERM and SIGINT (Ctrl-C) an orderly stop that exits with
    status 0.

    twistd's own handlers stop the reactor too, but then re-raise the
    signal so the process dies of it; for a router these signals are the
    normal way to stop (links close with reason shutdown), and supervisors
    and shells should see success.  Installed once the reactor runs, after
    twistd's handlers.
    """
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda signum, frame: reactor.callFromThread(reactor.stop))
