"""
C{meshroute ha}: operate an HA instance (docs/ha.md); today its one
command, C{force-activate}.
"""

import getpass
import os
import socket
import sqlite3
import sys
import time

from twisted.python import usage

from meshroute.cli.command_options import CommandOptions
from meshroute.data_dir_lock import DataDirInUse, hold_data_dir
from meshroute.events import EventLog
from meshroute.ha import records
from meshroute.ha.reporting import HAEventLog


class ForceActivateOptions(CommandOptions):
    synopsis = "--data-dir DIR --accept-data-loss"
    longdesc = (
        "Make the stopped HA instance of DIR activate at its next start without asking the "
        "voters, in an epoch above every epoch it knows: the one way around the start-up "
        "rule, for when the instance that holds the newest data is gone for good.  Changes "
        "that were confirmed to clients and that this instance lacks are lost.  Refused "
        "while a router runs on DIR.  Written to DIR/ha.db and logged (ha.force-activate)."
    )
    optParameters = [["data-dir", "d", None, "The stopped instance's data dir."]]
    optFlags = [["accept-data-loss", None,
                 "Say that you accept losing confirmed changes this instance lacks."]]

    def postOptions(self) -> None:
        if not self["data-dir"]:
            raise usage.UsageError("--data-dir DIR is required")
        if not self["accept-data-loss"]:
            raise usage.UsageError(
                "refused without --accept-data-loss: a forced activation skips the voters, "
                "so this instance serves even if it lacks changes that were confirmed to "
                "clients, which are then lost for good; start the instance normally unless "
                "the instance with the newest data cannot come back")


class HAOptions(CommandOptions):
    synopsis = "force-activate [options]"
    longdesc = "Operate an HA instance (docs/ha.md)."
    subCommands = [
        ["force-activate", None, ForceActivateOptions,
         "Activate a stopped instance at its next start, accepting data loss."],
    ]

    def postOptions(self) -> None:
        if self.subCommand is None:
            raise usage.UsageError("an ha command is required: force-activate")


def force_activate(options, out) -> int:
    """
    C{meshroute ha force-activate}: record the forced activation in the
    stopped instance's C{ha.db} and log it.
    """
    # The global reactor is imported when the command runs, not with the
    # module: importing it installs it, which only a command that runs
    # may do.
    from twisted.internet import reactor

    data_dir = options["data-dir"]
    if not os.path.isdir(data_dir):
        print(f"meshroute: {data_dir} is not a directory", file=sys.stderr)
        return 1
    try:
        lock = hold_data_dir(data_dir)
    except DataDirInUse as e:
        print(f"meshroute: {e}: stop it first", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"meshroute: {e}", file=sys.stderr)
        return 1
    try:
        identity = records.read_identity(data_dir)
        if identity is None:
            print(f"meshroute: {data_dir} holds no HA instance's records ({records.HA_DB}): "
                  "only an instance that has run with [ha] can be force-activated",
                  file=sys.stderr)
            return 1
        marker = records.ForcedActivation(f"{getpass.getuser()}@{socket.gethostname()}",
                                          time.time())
        records.record_forced_activation(data_dir, marker)
        event_log = EventLog(data_dir, identity.router, reactor)
        HAEventLog(event_log, reactor, identity.group, identity.role).force_activate(
            "recorded", requested_by=marker.requested_by, epoch=None)
        event_log.close()
    except (records.RecordsError, OSError, sqlite3.Error) as e:
        print(f"meshroute: cannot record the forced activation in {data_dir}: {e}",
              file=sys.stderr)
        return 1
    finally:
        lock.close()
    out.write(f"recorded in {os.path.join(data_dir, records.HA_DB)}: instance "
              f"{identity.router}/{identity.role} of group {identity.group} activates at its "
              "next start without asking the voters, in an epoch above every epoch it knows; "
              "confirmed changes it lacks are lost (event ha.force-activate logged)\n")
    return 0


def ha(options, out) -> int:
    return HA_COMMANDS[options.subCommand](options.subOptions, out)


HA_COMMANDS = {"force-activate": force_activate}
