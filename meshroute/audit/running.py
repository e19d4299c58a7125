"""
What every audit run, the batch and the streaming one, starts and ends
the same way with: the Spark session, the progress lines on stderr, and
the exit status of its verdict.
"""

import atexit
import os
import tempfile
import time

from meshroute.audit import report
from meshroute.audit.settings import DEFAULT_MASTER, AuditSettings

#: The exit statuses of a run (and of C{meshroute audit}): the mesh kept its
#: promises; bad input or options; the mesh did not keep them.
EXIT_OK = 0
EXIT_BAD_INPUT = 1
EXIT_BROKEN_PROMISES = 2

#: Memory for the local-mode driver (which is also the executor) unless
#: --conf spark.driver.memory says otherwise: a quarter of the machine's,
#: within these bounds (GiB).  10 million events ran in 5 (2 was too little).
LOCAL_DRIVER_MEMORY_GIB = (2, 8)


def local_driver_memory() -> str:
    """
    C{spark.driver.memory} for local mode on this machine.
    """
    low, high = LOCAL_DRIVER_MEMORY_GIB
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        return f"{low}g"
    return f"{int(min(max(total / 4, low), high))}g"

#: Spark's own logging for the JVM we launch: warnings and up, on stderr,
#: without the notices every run would print: the native library's, and
#: the window operator's about a window over one partition, which the
#: totals' percentiles are on purpose (one group of a few rows, the
#: distinct latencies: L{meshroute.audit.views.percentiles}).
LOG4J2 = """\
rootLogger.level = {level}
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{HH:mm:ss}} %p %c{{1}}: %m%n
logger.native.name = org.apache.hadoop.util.NativeCodeLoader
logger.native.level = error
logger.window.name = org.apache.spark.sql.execution.window.WindowExec
logger.window.level = error
"""


class Progress:
    """
    One line per step on stderr, with the time since the start.
    """

    def __init__(self, err, quiet: bool) -> None:
        self._err = err
        self._quiet = quiet
        self._start = time.monotonic()
        self._last = self._start
        self.steps: list[dict] = []

    def __call__(self, text: str) -> None:
        now = time.monotonic()
        self.steps.append({"step": text, "seconds": round(now - self._last, 3)})
        self._last = now
        if not self._quiet:
            self._err.write(f"audit [{now - self._start:7.1f} s] {text}\n")
            self._err.flush()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self._start


def _local_parallelism(master: str) -> int:
    inside = master[master.find("[") + 1:master.find("]")] if "[" in master else "1"
    try:
        return max(int(inside.split(",")[0]), 1)
    except ValueError:
        return os.cpu_count() or 1


def session_conf(master: str, conf: dict[str, str], quiet: bool, tty: bool) -> dict[str, str]:
    """
    The Spark settings the job starts a session with: loopback, no UI
    and few shuffle partitions on local mode; console progress bars only
    on a terminal and not when quiet; then the user's C{conf}, which wins.
    """
    settings = {
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.debug.maxToStringFields": "500",
        # The parsed events' cache is mostly nulls and short strings: it
        # compressed by some 5 % for a fifth of the read's CPU time.
        "spark.sql.inMemoryColumnarStorage.compressed": "false",
        # The JSON source checks its pushed-down filters, none here, anew
        # for every line it parses: 3 % of the tasks' time.
        "spark.sql.json.filterPushdown.enabled": "false",
        # The tables are written by concurrent jobs (L{write_views}): each
        # has its share of the cores, and a small one does not wait for a
        # large one to end.
        "spark.scheduler.mode": "FAIR",
        "spark.ui.showConsoleProgress": "true" if tty and not quiet else "false",
    }
    if master.startswith("local"):
        settings.update({
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": str(2 * _local_parallelism(master)),
            # Adaptive execution plans each shuffle again from its
            # statistics, with jobs of its own: on one machine's few
            # partitions it gains nothing at ten million events and costs
            # a fifth of a small audit's (and a micro-batch's) time.
            "spark.sql.adaptive.enabled": "false",
            "spark.driver.memory": local_driver_memory(),
        })
    settings.update(conf)
    return settings


def _under_spark_submit() -> bool:
    return "PYSPARK_GATEWAY_PORT" in os.environ


def start_spark(settings: AuditSettings, err):
    """
    A SparkSession for C{settings}: local mode by default, C{--master}
    when given, spark-submit's own when launched by it.
    """
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("meshroute-audit")
    master = settings.master
    if _under_spark_submit():
        if master:
            err.write("meshroute audit: --master is ignored under spark-submit; "
                      "use spark-submit --master\n")
        conf = dict(settings.conf)
    else:
        master = master or DEFAULT_MASTER
        builder = builder.master(master)
        conf = session_conf(master, settings.conf, settings.quiet, err.isatty())
        if master.startswith("local"):
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            if "spark.driver.extraJavaOptions" not in conf:
                conf["spark.driver.extraJavaOptions"] = f"-Dlog4j2.configurationFile=" \
                    f"file:{_log4j2_file('error' if settings.quiet else 'warn')}"
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR" if settings.quiet else "WARN")
    return spark


def _log4j2_file(level: str) -> str:
    """
    A log4j2 configuration for the JVM about to start, in a file of this
    process's own (removed when it exits).
    """
    fd, path = tempfile.mkstemp(prefix="meshroute-audit-log4j2-", suffix=".properties")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(LOG4J2.format(level=level))
    atexit.register(_remove, path)
    return path


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


def have_pyspark(err) -> bool:
    """
    Whether pyspark can be imported; if not, say how to install it.
    """
    try:
        import pyspark  # noqa: F401
    except ImportError:
        err.write("meshroute audit: pyspark is not installed; "
                  "install meshroute with the audit extra: pip install 'meshroute[audit]'\n")
        return False
    return True


def finish(summary: dict, settings: AuditSettings, out) -> int:
    """
    Print the verdict of C{summary} on C{out}; return the exit status it
    makes.
    """
    for line in report.console_lines(summary, settings.out.rstrip("/")):
        out.write(line + "\n")
    out.flush()
    return EXIT_OK if summary["ok"] else EXIT_BROKEN_PROMISES
