"""
The audit on a real Spark standalone cluster: a master and two workers on
127.0.0.1 started from the pyspark installation
(meshroute.audit.standalone), the unchanged job submitted to it with
C{--master spark://127.0.0.1:PORT} and meshroute shipped as a zip; the
batch audit's result equals local mode's, the streaming audit's equals
the batch audit's; every process started is stopped.
"""

import json
import re
import subprocess
import sys

import pytest

from support.closed_event_files import Follower
from support.spark import spark  # noqa: F401 (a fixture)
from support.routers import router_env
from support.audit_testing import audit, figures
from support.audit_meshes import rotated_synthetic

from meshroute.audit.running import EXIT_BROKEN_PROMISES

#: Spark's streaming audit at length: run by `make test-slow` (CI runs it
#: after `make test`), so that `make test` stays under 20 minutes.
pytestmark = pytest.mark.slow

#: Spark start-up, executors on two workers, a loaded two-core machine.
DEADLINE_S = 1200


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    pytest.importorskip("pyspark")
    from meshroute.audit.standalone import StandaloneCluster

    with StandaloneCluster(str(tmp_path_factory.mktemp("spark")), workers=2) as running:
        started = [process for _, process, _ in running.processes]
        yield running
    assert all(process.poll() is not None for process in started)


@pytest.mark.timeout(2400)
def test_batch_and_streaming_audits_on_a_standalone_cluster(spark, cluster, tmp_path):  # noqa: F811
    logs = rotated_synthetic(tmp_path, per_file=200)
    on_cluster = subprocess.run(
        [sys.executable, "-m", "meshroute.cli", "audit", str(logs), "--out",
         str(tmp_path / "cluster"), "--quiet", *cluster.audit_args()],
        env=router_env(), capture_output=True, text=True, timeout=DEADLINE_S)
    assert on_cluster.returncode == EXIT_BROKEN_PROMISES, on_cluster.stderr[-3000:]
    cluster_summary = json.loads((tmp_path / "cluster" / "summary.json").read_text())
    assert cluster_summary["audit"]["master"] == cluster.url
    code, _, _, local_summary = audit(spark, [logs], tmp_path / "local")
    assert code == EXIT_BROKEN_PROMISES
    assert figures(cluster_summary) == figures(local_summary)

    streaming = Follower([logs], tmp_path / "streamed", "--once", "--quiet",
                         *cluster.audit_args())
    assert streaming.wait(DEADLINE_S) == EXIT_BROKEN_PROMISES, streaming.stderr()[-3000:]
    streamed = json.loads((tmp_path / "streamed" / "summary.json").read_text())
    assert streamed["audit"]["master"] == cluster.url
    assert figures(streamed) == figures(local_summary)


def test_the_ratio_to_a_bare_scan_is_printed_on_the_cluster(cluster, tmp_path, capsys):
    """
    As C{make audit-cluster} ends: the audit's ratio to a bare scan of
    the same logs on the same cluster.
    """
    from meshroute.audit.standalone import print_ratio

    logs = rotated_synthetic(tmp_path, per_file=200)
    audit_args = [str(logs), "--out", str(tmp_path / "out"), "--quiet"]
    on_cluster = subprocess.run(
        [sys.executable, "-m", "meshroute.cli", "audit", *audit_args, *cluster.audit_args()],
        env=router_env(), capture_output=True, text=True, timeout=DEADLINE_S)
    assert on_cluster.returncode == EXIT_BROKEN_PROMISES, on_cluster.stderr[-3000:]
    print_ratio(audit_args, cluster)
    line = capsys.readouterr().out.splitlines()[-1]
    ratio = re.fullmatch(r"ratio to a bare scan: (\d+\.\d\d)x \(audit ([\d.]+) s, "
                         r"bare scan ([\d.]+) s, ([\d,]+) events\)", line)
    assert ratio, line
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert int(ratio[4].replace(",", "")) == summary["inputs"]["lines"]
    assert float(ratio[2]) == round(summary["audit"]["elapsed_s"], 1)


#: Where an executor's Python finds meshroute: printed by a one-task job.
WHERE_EXECUTORS_IMPORT = """
import sys
from pyspark.sql import SparkSession

builder = SparkSession.builder.master(sys.argv[1])
for pair in sys.argv[2:]:
    key, value = pair.split("=", 1)
    builder = builder.config(key, value)
spark = builder.getOrCreate()
found = spark.sparkContext.parallelize([0], 1).map(lambda _: __import__("meshroute").__file__)
print(found.collect()[0])
spark.stop()
"""


@pytest.mark.timeout(2400)
def test_meshroute_is_shipped_to_the_executors(cluster):
    """
    A Python task on the cluster imports meshroute from the zip that
    C{spark.submit.pyFiles} shipped, not from an installation.
    """
    result = subprocess.run([sys.executable, "-c", WHERE_EXECUTORS_IMPORT, cluster.url,
                             *cluster.conf()],
                            env=router_env(), capture_output=True, text=True, timeout=DEADLINE_S)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "meshroute.zip" in result.stdout.strip().splitlines()[-1], result.stdout
