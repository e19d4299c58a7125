"""
C{meshroute check-config}: validate router configurations, and the two
files of each HA pair against each other.
"""

import os
import sys

from meshroute.cli.command_options import CommandOptions
from meshroute.config import config_warnings, format_config, load_config
from meshroute.errors import ConfigError
from meshroute.harules.settings import InstanceSettings, pair_problems
from meshroute.security.load import load_policy


class CheckConfigOptions(CommandOptions):
    synopsis = "FILE [FILE...]"
    longdesc = ("Validate router configurations and print each with every default filled in; "
                "warnings (settings that work, but probably not as hoped) go to stderr.  "
                "Given the files of both instances of an HA pair, also check that they "
                "agree on what pairs them (router name, group name, roles, each peer "
                "endpoint reaching the other's listener, the password files' secret, "
                "witnesses, lease-timeout, client endpoints).")

    def parseArgs(self, path: str, *paths: str) -> None:
        self["paths"] = [path, *paths]


def check_config(options, out) -> int:
    """
    Each file on its own, then the HA pairs among them (a disagreement
    between the two files of a pair is an error: the instances would
    refuse each other, or worse, each serve).
    """
    status = 0
    instances = []
    for path in options["paths"]:
        try:
            config = load_config(path)
            if config.security is not None:
                load_policy(config)
        except ConfigError as e:
            print(f"meshroute: {e}", file=sys.stderr)
            status = 1
            continue
        for warning in config_warnings(config):
            print(f"meshroute: warning: {warning}", file=sys.stderr)
        out.write(f"# effective configuration of {config.path}\n")
        out.write(format_config(config))
        if config.ha is not None:
            instances.append(InstanceSettings(config.path, config.name, config.ha,
                                              os.path.abspath(config.data_dir)))
    for problem in pair_problems(instances):
        print(f"meshroute: {', '.join(problem.paths)}: {problem.key}: {problem.message}",
              file=sys.stderr)
        status = 1
    return status
