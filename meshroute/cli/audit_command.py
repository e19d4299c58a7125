"""
C{meshroute audit}: the mesh audit (L{meshroute.audit.job}), whose own
parser reads the command line.
"""

import sys

from meshroute.audit import job
from meshroute.cli.command_options import CommandOptions


class AuditOptions(CommandOptions):
    synopsis = ("EVENTS... --out DIR [--master URL] [--conf KEY=VALUE]... "
                "[--in-flight-grace SECONDS] [--keepalive-limit INTERVALS] [--quiet]")
    longdesc = (
        "Audit the mesh from its routers' event logs on Spark (PySpark, the 'audit' extra). "
        "See meshroute audit --help and docs/events.md, 'Audit'."
    )

    def parseOptions(self, options=None) -> None:
        # Options may follow EVENTS, which getopt does not allow, so the
        # job's own parser reads them.  A usage error is bad input (exit
        # status 1): status 2 means the mesh broke its promises.
        try:
            self["settings"] = job.settings_from_args(list(options or []))
        except job.UsageProblem as e:
            self["error"] = str(e)


def audit(options, out) -> int:
    if options.get("error"):
        print(f"meshroute audit: {options['error']}", file=sys.stderr)
        return 1
    return job.run(options["settings"], out)
