"""
The C{meshroute} command: operator tools around running routers.

C{twistd -n meshroute --config FILE} runs a router; this command checks
configurations, inspects routers through their admin API, and sends and
receives messages through a router's client listener (L{meshroute.client}).
"""

# The docstring above is what C{python -m meshroute.cli --help} shows, as
# it did when the command was one module.

import sys

from meshroute.cli import main

sys.exit(main())
