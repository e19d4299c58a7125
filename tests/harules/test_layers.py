"""
What the import contracts (.importlinter, run by C{make test}) cannot
say: HA's rules are pure, so importing them installs no reactor.
"""

import subprocess
import sys

RULES = ("quorum", "election", "lease", "role", "settings")


def test_the_ha_rules_import_no_reactor():
    modules = "; ".join(f"import meshroute.harules.{name}" for name in RULES)
    check = (f"{modules}; import sys; "
             "assert 'twisted.internet.reactor' not in sys.modules, 'a reactor was installed'")
    result = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
