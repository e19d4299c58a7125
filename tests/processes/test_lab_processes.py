"""
C{make lab} as a newcomer runs it: C{python -m meshroute.lab etc/lab} on a
copy of the checkout's C{etc/lab}, in a directory of its own, with
C{--duration 0} (the scenario, then stop and audit, without waiting for
Ctrl-C).  The lab narrates; the test reads the narration for each step's
outcome.  It listens on the lab's fixed ports (etc/lab/*.toml).
"""

import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys

import pytest

from support.routers import REPO_ROOT, router_env

#: The failover bound of issue 9 at the lab's [ha] defaults (lease 3 s, two
#: heartbeats of 0.5 s, 1 s to start serving).
FAILOVER_BOUND_S = 3.0 + 2 * 0.5 + 1.0

#: What the lab's narration is held to.  The lab runs six routers in four
#: processes with their load beside the rest of the suite, and times the
#: takeover by polling: it came within 5.1 s once in CI.  The bound itself is
#: held where a pair runs alone (test_ha_faults_processes); here it is enough
#: that the backup took over on its lease, long before any connection TTL.
LAB_FAILOVER_LIMIT_S = 2 * FAILOVER_BOUND_S


def run_lab(directory) -> str:
    """
    Run the lab in C{directory} to its end; return what it printed.  Its
    routers are its children: on a timeout the whole process group goes.
    """
    shutil.copytree(REPO_ROOT / "etc" / "lab", directory / "etc" / "lab")
    lab = subprocess.Popen(
        [sys.executable, "-m", "meshroute.lab", "etc/lab", "--duration", "0"],
        cwd=directory, env=router_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = lab.communicate(timeout=500)
    except subprocess.TimeoutExpired:
        os.killpg(lab.pid, signal.SIGKILL)
        output, _ = lab.communicate()
        pytest.fail(f"the lab still ran after 500 s:\n{output}")
    assert lab.returncode == 0, output
    return output


def seconds(output: str, pattern: str) -> float:
    match = re.search(pattern, output)
    assert match, f"no line matching {pattern!r} in:\n{output}"
    return float(match.group(1))


@pytest.mark.timeout(600)
def test_the_lab_plays_its_scenario_with_colocated_pairs_and_the_audit_finds_it_clean(
        tmp_path):
    output = run_lab(tmp_path)

    def says(text: str) -> None:
        assert text in output, f"{text!r} not in:\n{output}"

    says("meshroute lab: starting 6 routers in 4 processes from etc/lab")
    assert re.search(r"router-d-backup +topology page http://127.0.0.1:8114/   in "
                     r"router-c-primary's process", output), output
    says("consumer of orders on router-d: received 1000 of 1000, each exactly once")
    # Both neighbours of the frozen router close their links to it before
    # anything is sent to it, so the messages wait at their sender.
    says("router-a and router-c-primary closed their links to router-b: no route leads to it")
    says("router-a holds them in its store until router-b is reachable again: "
         "backlog {'router-b': 500}")
    says("every link is in delivery again")
    says("consumer of inbox on router-b: received 500 of 500, each exactly once")
    # A durable topic subscription at the frozen router collected what was
    # published while it was away.
    says("its interest reached every router; the subscriber left")
    says("consumer of lab.# on router-b: received 300 of 300, each exactly once")
    # The pairs, whose processes back each other up: a failover under
    # traffic, the process of router-c's primary killed with router-d's
    # backup in it...
    says("router-c-primary's process also runs router-d-backup ([[ha.colocated]])")
    assert re.search(r"router-c-primary killed, and router-d-backup with it \(one process\); "
                     r"\d+ of the 2000 were in its queue", output), output
    took = seconds(output, r"router-c-backup serves ([0-9.]+) s after the kill")
    assert took <= LAB_FAILOVER_LIMIT_S, output
    says("ha: failover (takeover) from primary to backup")
    # ...router-d's primary, its backup gone, serving alone...
    assert re.search(r"router-d-primary serves router-d alone [0-9.]+ s after the kill", output)
    for router in ("router-c", "router-d"):
        says(f"consumer of payments on {router}: received 2000 of 2000, each exactly once")
    # ...the killed process back, both its instances backups again...
    returned = output[output.index("== 6. router-c-primary returns with router-d-backup"):]
    assert "router-c-primary in sync" in returned, returned
    assert "router-d-backup in sync" in returned, returned
    # ...failback (its event may come before the lab's heading for it),
    # and the pair replicating again.
    assert re.search(r"router-c-primary ha: failover \((handover|takeover)\) from backup to "
                     r"primary", returned), returned
    failback = output[output.index("== 7. failback"):]
    assert "router-c-primary serves again" in failback, failback
    for router in ("router-c", "router-d"):
        assert re.search(rf"{router}-primary +active-replicated", failback), failback
        assert re.search(rf"{router}-backup +backup-in-sync", failback), failback
        says(f"consumer of payments on {router}: received 200 of 200, each exactly once")
    # Only the pair whose active was killed is shown: router-d's was, with it.
    assert "== 5. router-d" not in output, output
    # Session events read as link events do, never as JSON.
    assert re.search(r"router-a  session [0-9a-f]{10}  client    meshroute-\d+ +→ opened", output)
    narration = output.split("== the audit")[0]
    assert '{"' not in narration, narration
    says("watch it on the topology page, http://127.0.0.1:8101/ (every router's admin "
         "endpoint serves one), and scrape http://127.0.0.1:8101/metrics (Prometheus)")
    # ...and the audit's verdict.
    if importlib.util.find_spec("pyspark") is None or shutil.which("java") is None:
        says("audit skipped")
    else:
        says("audit exit status 0: the mesh kept its promises")
