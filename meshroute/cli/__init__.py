"""
The C{meshroute} command: operator tools around running routers.

C{twistd -n meshroute --config FILE} runs a router; this command checks
configurations, inspects routers through their admin API, and sends and
receives messages through a router's client listener (L{meshroute.client}).

One module per command (C{status_command}, C{send_command}, ...); this
one holds the command line above them and L{main}, the console script.
"""

import sys

from twisted.python import usage

from meshroute.cli.audit_command import AuditOptions, audit
from meshroute.cli.check_config_command import CheckConfigOptions, check_config
from meshroute.cli.command_options import CommandOptions
from meshroute.cli.ha_commands import HAOptions, ha
from meshroute.cli.receive_command import ReceiveOptions, receive
from meshroute.cli.send_command import SendOptions, send
from meshroute.cli.status_command import StatusOptions, status
from meshroute.cli.user_commands import UserOptions, user


class Options(CommandOptions):
    synopsis = "COMMAND [options]"
    subCommands = [
        ["check-config", None, CheckConfigOptions, "Validate a configuration file."],
        ["status", None, StatusOptions, "Show a router's links."],
        ["send", None, SendOptions, "Send messages through a router."],
        ["receive", None, ReceiveOptions, "Consume messages from a router's queue."],
        ["audit", None, AuditOptions, "Audit the mesh from its event logs (PySpark)."],
        ["ha", None, HAOptions, "Operate an HA instance: force-activate."],
        ["user", None, UserOptions, "Manage a users file: add, remove, list."],
    ]

    def postOptions(self) -> None:
        if self.subCommand is None:
            raise usage.UsageError("a command is required")


COMMANDS = {"check-config": check_config, "status": status, "send": send, "receive": receive,
            "audit": audit, "ha": ha, "user": user}


def main(argv=None, out=sys.stdout) -> int:
    options = Options()
    try:
        options.parseOptions(sys.argv[1:] if argv is None else argv)
    except usage.UsageError as e:
        print(f"meshroute: {e}\n\n{options}", file=sys.stderr)
        return 2
    return COMMANDS[options.subCommand](options.subOptions, out)

