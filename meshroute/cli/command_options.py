"""
What every C{meshroute} command's options have.
"""

import sys

from twisted.python import usage

from meshroute import __version__


class CommandOptions(usage.Options):
    """
    The options of every C{meshroute} command: C{--version} is meshroute's
    (C{usage.Options} would print Twisted's).
    """

    def opt_version(self) -> None:
        """
        Print meshroute's version and exit.
        """
        print(f"meshroute {__version__}")
        sys.exit(0)
