"""
Shared fixtures.

Every test runs under L{observe_errors}: an error or a failure logged
through twisted.logger fails the test, unless the test takes the errors it
expects out of C{observe_errors.errors}.
"""

import pytest
from twisted.logger import LogLevel, globalLogPublisher


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """
    With pytest-xdist's C{--dist loadfile} (C{make test} runs two
    workers), a test file runs whole on one worker (its module-scoped
    fixtures are set up once, and some of its tests read what others
    left), and the files that audit on the shared Spark session in this
    process (those that import its fixture) run on the same worker, one
    after the other: the audits are CPU-bound, so two sessions side by
    side would only take turns, while the tests of real router processes,
    which mostly wait, run beside them.  Tests of router processes that
    audit at their end stay a unit of their own (they start a session on
    their worker if it has none).
    """
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    tests = config.rootpath / "tests"
    audits = {f"tests/{path.name}" for path in tests.glob("test_*.py")
              if not path.stem.endswith("_processes")
              and "from conftest_spark import spark" in path.read_text()}

    class AuditsTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            return "spark" if path in audits else path

    return AuditsTogether(config, log)


class ErrorObserver:
    """
    Collects logged errors and failures.
    """

    def __init__(self) -> None:
        self.errors: list[dict] = []

    def __call__(self, event: dict) -> None:
        if event.get("log_failure") is not None or event.get("log_level") in (
            LogLevel.error,
            LogLevel.critical,
        ):
            self.errors.append(event)

    def take(self, predicate) -> list[dict]:
        """
        Remove and return the logged errors matching C{predicate(event)}.
        """
        taken = [e for e in self.errors if predicate(e)]
        self.errors = [e for e in self.errors if not predicate(e)]
        return taken


@pytest.fixture(autouse=True)
def observe_errors():
    observer = ErrorObserver()
    globalLogPublisher.addObserver(observer)
    try:
        yield observer
    finally:
        globalLogPublisher.removeObserver(observer)
    if observer.errors:
        from twisted.logger import formatEvent

        messages = [
            formatEvent(e) + (f"\n{e['log_failure'].getTraceback()}" if e.get("log_failure") else "")
            for e in observer.errors
        ]
        pytest.fail("errors were logged:\n" + "\n".join(messages), pytrace=False)


@pytest.fixture
def clock():
    """
    A virtual clock: every timer of a test without sockets runs on it.
    """
    from twisted.internet.task import Clock

    return Clock()


@pytest.fixture
def engine(tmp_path, clock):
    """
    The engine a router-side client test runs against: a real store under
    L{fake_router.FakeEngine}, whose commits the test lets land.
    """
    from fake_router import FakeEngine

    engine = FakeEngine(str(tmp_path / "store.sqlite"), clock)
    yield engine
    engine.close()


@pytest.fixture
def browser():
    """
    A headless Chromium (L{browser.Browser}); the test is skipped where
    none is installed.
    """
    from browser import Browser, chromium_path

    if chromium_path() is None:
        pytest.skip("no chromium on the PATH (Debian: apt-get install chromium; "
                    "`make test` installs it where it can)")
    with Browser() as chromium:
        yield chromium


@pytest.fixture
def artifacts():
    """
    The directory a test saves screenshots and other artifacts in
    (L{browser.artifacts_directory}: var/test-artifacts by default).
    """
    from browser import artifacts_directory

    return artifacts_directory()
