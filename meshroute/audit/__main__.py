"""
C{python -m meshroute.audit EVENTS... --out DIR}: the audit job.
"""

import sys

from meshroute.audit.job import main

sys.exit(main())
