"""
A Spark standalone cluster on 127.0.0.1 from the pyspark installation, and
the audit submitted to it: C{make audit-cluster}, or

    python -m meshroute.audit.standalone [--workers 2] -- EVENTS... --out DIR

The pip package of pyspark has no start scripts, only C{bin/spark-class}:
the master is C{spark-class org.apache.spark.deploy.master.Master} and
each worker C{spark-class org.apache.spark.deploy.worker.Worker
spark://127.0.0.1:PORT}, each a process of ours, its log under the work
directory.  Every worker offers one core and a little memory (the
development machine has two cores).  L{StandaloneCluster} starts them,
waits until every worker has registered, and stops all it started, in
reverse order, whatever happens.

The audit runs unchanged with C{--master spark://127.0.0.1:PORT}; after a
batch audit, the bare scan of the same logs (L{meshroute.audit.bare_scan})
runs on the same cluster, and the audit's ratio to it is printed last.  Its
executors run only Spark's own code (the job has no Python UDF), but
whatever Python the job may ship is shipped the documented way: this
package as a zip in C{spark.submit.pyFiles} (L{package_zip}), so an
executor can import it.
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import zipfile

from meshroute.audit.running import EXIT_BROKEN_PROMISES, EXIT_OK

#: How long the master and the workers have to come up.
START_TIMEOUT_S = 120.0

#: Heap of the master's and the workers' own JVMs (not the executors').
DAEMON_MEMORY = "256m"

#: What each worker offers its executors.
WORKER_CORES = 1
WORKER_MEMORY = "1g"
EXECUTOR_MEMORY = "768m"


class ClusterError(Exception):
    """
    The cluster did not come up: the message names the process and its log.
    """


def spark_home() -> str:
    import pyspark

    return os.path.dirname(os.path.abspath(pyspark.__file__))


def _die_with_parent() -> None:
    """
    In the child before C{exec}: on Linux, be sent SIGTERM when the
    process that started the cluster dies, however it dies (spark-class
    execs java, which keeps the setting), so no daemon outlives it.
    """
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def package_zip(directory: str) -> str:
    """
    The C{meshroute} package as a zip in C{directory}, for
    C{spark.submit.pyFiles}; return its path.
    """
    import meshroute

    root = os.path.dirname(os.path.abspath(meshroute.__file__))
    path = os.path.join(directory, "meshroute.zip")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for folder, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith((".py", ".sql")):
                    full = os.path.join(folder, name)
                    archive.write(full, os.path.relpath(full, os.path.dirname(root)))
    return path


class StandaloneCluster:
    """
    A master and C{workers} workers on 127.0.0.1, under C{work_dir}.
    """

    def __init__(self, work_dir: str, workers: int = 2) -> None:
        self.work_dir = work_dir
        self.workers = workers
        self.port = free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.processes: list[tuple[str, subprocess.Popen, str]] = []

    def _spawn(self, name: str, *args: str) -> str:
        log = os.path.join(self.work_dir, f"{name}.log")
        env = {**os.environ, "SPARK_HOME": spark_home(), "SPARK_LOCAL_IP": "127.0.0.1",
               "SPARK_DAEMON_MEMORY": DAEMON_MEMORY, "SPARK_NO_DAEMONIZE": "1",
               "SPARK_LOG_DIR": self.work_dir, "SPARK_WORKER_DIR": self.work_dir,
               "PYSPARK_PYTHON": sys.executable}
        with open(log, "w") as out:
            process = subprocess.Popen(
                [os.path.join(spark_home(), "bin", "spark-class"), *args],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                start_new_session=True, preexec_fn=_die_with_parent)
        self.processes.append((name, process, log))
        return log

    def _wait_for(self, name: str, log: str, text: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            with open(log, errors="replace") as f:
                if text in f.read():
                    return
            process = next(p for n, p, _ in self.processes if n == name)
            if process.poll() is not None:
                raise ClusterError(f"the Spark {name} exited {process.returncode}; see {log}")
            if time.monotonic() > deadline:
                raise ClusterError(f"the Spark {name} did not log {text!r} within "
                                   f"{START_TIMEOUT_S:g} s; see {log}")
            time.sleep(0.2)

    def start(self) -> "StandaloneCluster":
        os.makedirs(self.work_dir, exist_ok=True)
        try:
            log = self._spawn("master", "org.apache.spark.deploy.master.Master",
                              "--host", "127.0.0.1", "--port", str(self.port),
                              "--webui-port", str(free_port()))
            self._wait_for("master", log, "I have been elected leader")
            for n in range(1, self.workers + 1):
                log = self._spawn(f"worker-{n}", "org.apache.spark.deploy.worker.Worker",
                                  self.url, "--host", "127.0.0.1", "--cores", str(WORKER_CORES),
                                  "--memory", WORKER_MEMORY, "--webui-port", str(free_port()),
                                  "--work-dir", os.path.join(self.work_dir, f"worker-{n}"))
                self._wait_for(f"worker-{n}", log, "Successfully registered with master")
        except BaseException:
            self.stop()
            raise
        return self

    def conf(self) -> list[str]:
        """
        The audit's C{--conf} arguments for this cluster: the driver on
        127.0.0.1, one executor per worker, this package shipped and this
        Python for the executors' Python workers.
        """
        return [
            "spark.driver.host=127.0.0.1",
            "spark.driver.bindAddress=127.0.0.1",
            "spark.ui.enabled=false",
            f"spark.executor.memory={EXECUTOR_MEMORY}",
            f"spark.executor.cores={WORKER_CORES}",
            f"spark.cores.max={WORKER_CORES * self.workers}",
            f"spark.sql.shuffle.partitions={2 * WORKER_CORES * self.workers}",
            "spark.driver.memory=1g",
            f"spark.submit.pyFiles={package_zip(self.work_dir)}",
            f"spark.pyspark.python={sys.executable}",
        ]

    def audit_args(self) -> list[str]:
        return ["--master", self.url, *[x for pair in self.conf() for x in ("--conf", pair)]]

    def stop(self) -> None:
        """
        Stop every process started, workers first; SIGKILL what does not
        stop within 30 s.
        """
        for name, process, _ in reversed(self.processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for name, process, _ in reversed(self.processes):
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(30)
        self.processes.clear()

    def __enter__(self) -> "StandaloneCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m meshroute.audit.standalone",
        description="Start a Spark standalone master and workers on 127.0.0.1 from the "
                    "pyspark installation, run meshroute audit ARGS on it, stop them.")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--work-dir", default=None,
                        help="where the cluster's logs go (default: a temporary directory)")
    parser.add_argument("--no-bare-scan", action="store_true",
                        help="do not time a bare scan of the same logs after the audit "
                             "(by default the audit's ratio to it is printed last)")
    parser.add_argument("audit", nargs=argparse.REMAINDER,
                        help="-- then the arguments of meshroute audit")
    args = parser.parse_args(argv)
    audit_args = args.audit[1:] if args.audit[:1] == ["--"] else args.audit
    work_dir = args.work_dir or tempfile.mkdtemp(prefix="meshroute-spark-")
    # Stopped by a signal, stop the cluster too (SystemExit unwinds the with).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    with StandaloneCluster(work_dir, args.workers) as cluster:
        sys.stderr.write(f"Spark standalone cluster {cluster.url}, {args.workers} worker(s); "
                         f"logs in {work_dir}\n")
        status = run_to_end([sys.executable, "-m", "meshroute.audit", *audit_args,
                             *cluster.audit_args()])
        if status in (EXIT_OK, EXIT_BROKEN_PROMISES) and not args.no_bare_scan:
            print_ratio(audit_args, cluster)
        return status


def run_to_end(command: list[str], stdout=None) -> int:
    """
    Run C{command}; stop it if this process is stopped meanwhile.
    """
    process = subprocess.Popen(command, stdout=stdout)
    try:
        return process.wait()
    finally:
        if process.poll() is None:
            process.terminate()
            process.wait()


def print_ratio(audit_args: list[str], cluster: StandaloneCluster) -> None:
    """
    Run the bare scan (L{meshroute.audit.bare_scan}) of the batch audit's
    inputs on the same cluster, and print the audit's ratio to it, as
    C{benchmarks/audit_scale.py} prints it for local mode: the audit's
    own time (reading to report.html, from its summary.json) against the
    scan's.
    """
    from meshroute.audit.job import settings_from_args

    settings = settings_from_args(audit_args)
    if settings.follow:
        # A streaming audit's micro-batches have their own figure
        # (benchmarks/audit_follow.py); its run has no one time to give.
        return
    with open(os.path.join(settings.out, "summary.json")) as f:
        summary = json.load(f)
    with tempfile.TemporaryFile("w+") as out:
        if run_to_end([sys.executable, "-m", "meshroute.audit.bare_scan", *settings.inputs,
                       *cluster.audit_args()], stdout=out):
            sys.stderr.write("the bare scan failed: no ratio\n")
            return
        out.seek(0)
        scan = json.loads(out.read().splitlines()[-1])
    audit_s = summary["audit"]["elapsed_s"]
    print(f"ratio to a bare scan: {audit_s / scan['seconds']:.2f}x (audit {audit_s:.1f} s, "
          f"bare scan {scan['seconds']:.1f} s, {summary['inputs']['lines']:,} events)",
          flush=True)


if __name__ == "__main__":
    sys.exit(main())
