"""
C{meshroute check-config}: validate router configurations, and the two
files of each HA pair against each other.
"""

import os
import sys

from meshroute.cli.command_options import CommandOptions
from meshroute.config import config_warnings, load_config
from meshroute.config_writer import format_config
from meshroute.errors import ConfigError
from meshroute.harules.settings import InstanceSettings, pair_problems
from meshroute.security.load import load_policy


class CheckConfigOptions(CommandOptions):
    synopsis = "FILE [FILE...]"
    longdesc = ("Validate router configurations and print each with every default filled in; "
                "warnings (settings that work, but probably not as hoped) go to stderr.  "
                "The files of the HA instances a file hosts ([[ha.colocated]]) are checked "
                "and printed with it.  Given the files of both instances of an HA pair "
                "(or files hosting them), also check that they agree on what pairs them "
                "(router name, group name, roles, each peer endpoint reaching the other's "
                "listener, the password files' secret, witnesses, lease-timeout, client "
                "endpoints).")

    def parseArgs(self, path: str, *paths: str) -> None:
        self["paths"] = [path, *paths]


def check_config(options, out) -> int:
    """
    Each file on its own, with the files it hosts, then the HA pairs among
    all of them (a disagreement between the two files of a pair is an
    error: the instances would refuse each other, or worse, each serve).
    A file met twice (given, and hosted by another given file) is checked
    once; a file hosted by two files is an error: two processes would run
    its instance.
    """
    status = 0
    instances = []
    checked: set[str] = set()
    hosts: dict[str, str] = {}
    for path in options["paths"]:
        try:
            config = load_config(path)
            for each in (config, *config.colocated):
                if each.security is not None:
                    load_policy(each)
        except ConfigError as e:
            print(f"meshroute: {e}", file=sys.stderr)
            status = 1
            continue
        for index, hosted in enumerate(config.colocated):
            host = hosts.setdefault(os.path.realpath(hosted.path), config.path)
            if host != config.path:
                print(f"meshroute: {config.path}: ha.colocated[{index}].config: {hosted.path} "
                      f"is hosted by {host} too: two processes would run its instance",
                      file=sys.stderr)
                status = 1
        for each in (config, *config.colocated):
            if os.path.realpath(each.path) in checked:
                continue
            checked.add(os.path.realpath(each.path))
            for warning in config_warnings(each):
                print(f"meshroute: warning: {warning}", file=sys.stderr)
            hosted_by = f" (hosted by {config.path})" if each is not config else ""
            out.write(f"# effective configuration of {each.path}{hosted_by}\n")
            out.write(format_config(each))
            if each.ha is not None:
                instances.append(InstanceSettings(each.path, each.name, each.ha,
                                                  os.path.abspath(each.data_dir)))
    for problem in pair_problems(instances):
        print(f"meshroute: {', '.join(problem.paths)}: {problem.key}: {problem.message}",
              file=sys.stderr)
        status = 1
    return status
