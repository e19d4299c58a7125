"""
The audit's settings: what to audit and how, as the command line, a
test or a benchmark gives them (L{meshroute.audit.job.settings_from_args}
reads them from a command line).
"""

from dataclasses import dataclass, field

DEFAULT_MASTER = "local[*]"
DEFAULT_GRACE_S = 60.0
DEFAULT_KEEPALIVE_LIMIT = 6.0
DEFAULT_LATENCY_WINDOW_S = 60.0


@dataclass
class AuditSettings:
    """
    What to audit and how.
    """

    inputs: list[str]
    out: str
    master: str | None = None
    conf: dict[str, str] = field(default_factory=dict)
    in_flight_grace_s: float = DEFAULT_GRACE_S
    keepalive_limit: float = DEFAULT_KEEPALIVE_LIMIT
    latency_window_s: float = DEFAULT_LATENCY_WINDOW_S
    quiet: bool = False
    #: Follow the inputs (directories) with the streaming audit
    #: (L{meshroute.audit.follow}) instead of reading them once.
    follow: bool = False
    trigger_s: float = 10.0
    max_files_per_trigger: int = 100
    #: With C{follow}: stop once the files there now are audited.
    once: bool = False

