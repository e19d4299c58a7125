"""
The C{meshroute} command: operator tools around running routers.

C{twistd -n meshroute --config FILE} runs a router; this command checks
configurations and inspects routers through their admin API.
"""

import json
import sys
import urllib.error
import urllib.request

from twisted.python import usage

from meshroute.config import format_config, load_config
from meshroute.errors import ConfigError


class CheckConfigOptions(usage.Options):
    synopsis = "FILE"
    longdesc = "Validate a router configuration and print it with every default filled in."

    def parseArgs(self, path: str) -> None:
        self["path"] = path


class StatusOptions(usage.Options):
    synopsis = "--admin URL [--json]"
    longdesc = "Show a running router's identity and links, from its admin API."
    optParameters = [["admin", "a", None, "The router's admin base URL, e.g. http://127.0.0.1:8001"]]
    optFlags = [["json", None, "Print the raw JSON instead of a table."]]

    def postOptions(self) -> None:
        if not self["admin"]:
            raise usage.UsageError("--admin URL is required")


class Options(usage.Options):
    synopsis = "COMMAND [options]"
    subCommands = [
        ["check-config", None, CheckConfigOptions, "Validate a configuration file."],
        ["status", None, StatusOptions, "Show a router's links."],
    ]

    def postOptions(self) -> None:
        if self.subCommand is None:
            raise usage.UsageError("a command is required")


def check_config(options, out) -> int:
    try:
        config = load_config(options["path"])
    except ConfigError as e:
        print(f"meshroute: {e}", file=sys.stderr)
        return 1
    out.write(f"# effective configuration of {config.path}\n")
    out.write(format_config(config))
    return 0


def fetch_json(base: str, path: str):
    with urllib.request.urlopen(base.rstrip("/") + path, timeout=5) as response:
        return json.load(response)


def format_links(router: dict, links: list[dict]) -> str:
    """
    The human-readable status table.
    """
    lines = [f"router {router['name']} (meshroute {router['version']}, up {router['uptime_s']:.0f} s)"]
    if not links:
        lines.append("  no links")
    header = f"  {'peer':<16} {'direction':<10} {'stage':<15} {'keepalive':>10} {'counter':>8}"
    if links:
        lines.append(header)
    for link in links:
        interval = link["keepalive_interval_ms"]
        counter = link["keepalive_counter"]
        lines.append(
            f"  {link['peer'] or '?':<16} {link['direction']:<10} {link['stage']:<15} "
            f"{str(interval) + ' ms' if interval else '-':>10} "
            f"{counter if counter is not None else '-':>8}"
        )
    return "\n".join(lines) + "\n"


def status(options, out) -> int:
    try:
        router = fetch_json(options["admin"], "/api/v1/router")
        links = fetch_json(options["admin"], "/api/v1/links")
    except (urllib.error.URLError, OSError, ValueError) as e:
        print(f"meshroute: cannot read {options['admin']}: {e}", file=sys.stderr)
        return 1
    if options["json"]:
        out.write(json.dumps({"router": router, "links": links}, indent=1) + "\n")
    else:
        out.write(format_links(router, links))
    return 0


COMMANDS = {"check-config": check_config, "status": status}


def main(argv=None, out=sys.stdout) -> int:
    options = Options()
    try:
        options.parseOptions(sys.argv[1:] if argv is None else argv)
    except usage.UsageError as e:
        print(f"meshroute: {e}\n\n{options}", file=sys.stderr)
        return 2
    return COMMANDS[options.subCommand](options.subOptions, out)


if __name__ == "__main__":
    sys.exit(main())
