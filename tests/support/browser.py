"""
Headless Chromium for tests that look at a page as a person would.

L{Browser} starts Debian's C{chromium} headless, with the DevTools
protocol on a port of its own choosing (C{--remote-debugging-port=0}; the
port is read back from the C{DevToolsActivePort} file in its profile
directory), and talks to one tab over a WebSocket.  A test loads a page
once and then watches the live page change, polling the DOM with
L{Page.wait_for} (JavaScript evaluated in the page), never sleeping::

    def test_page(browser, artifacts):
        page = browser.open("http://127.0.0.1:8001/")
        page.wait_for("document.querySelectorAll('.node').length === 3",
                      what="three routers drawn")
        page.screenshot(artifacts / "three-routers.png")
        assert page.errors == []

The C{browser} fixture (tests/conftest.py) skips the test, with the reason,
where no Chromium is installed; C{artifacts} is the directory screenshots
go to (L{artifacts_directory}).  Exceptions the page throws and errors it
logs to its console are collected in L{Page.errors}, requests that failed
in L{Page.failed_requests}.
"""

import base64
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import websocket

#: Where screenshots and other test artifacts go, unless
#: C{MESHROUTE_TEST_ARTIFACTS} names another directory.
DEFAULT_ARTIFACTS = Path(__file__).resolve().parents[2] / "var" / "test-artifacts"

#: The window the page is laid out in (and screenshots' size).
WINDOW = (1280, 800)

#: How long Chromium may take to start and to answer one command on a
#: loaded machine.
START_TIMEOUT_S = 60.0
COMMAND_TIMEOUT_S = 60.0


class BrowserError(AssertionError):
    """
    Chromium failed: it did not start, a command failed, or a condition
    polled by L{Page.wait_for} did not hold in time.
    """


def chromium_path() -> str | None:
    """
    The Chromium executable on the PATH (Debian's C{chromium}, or
    C{chromium-browser} elsewhere), or None.
    """
    return shutil.which("chromium") or shutil.which("chromium-browser")


def artifacts_directory() -> Path:
    """
    The directory test artifacts are saved in (created if missing):
    C{$MESHROUTE_TEST_ARTIFACTS}, else C{var/test-artifacts} in the checkout.
    """
    directory = Path(os.environ.get("MESHROUTE_TEST_ARTIFACTS") or DEFAULT_ARTIFACTS)
    directory.mkdir(parents=True, exist_ok=True)
    return directory


class Page:
    """
    One tab, driven through the DevTools protocol.

    @ivar errors: what the page threw or logged as an error, one line each.
    @ivar failed_requests: what the browser logged about requests that
        failed (an HTTP error status, a refused connection), one line each.
    """

    def __init__(self, socket: websocket.WebSocket) -> None:
        self._socket = socket
        self._ids = itertools.count(1)
        self.errors: list[str] = []
        self.failed_requests: list[str] = []

    def command(self, method: str, **params) -> dict:
        """
        Send one DevTools command and return its result; events that
        arrive meanwhile are looked at for errors.
        """
        number = next(self._ids)
        self._socket.send(json.dumps({"id": number, "method": method, "params": params}))
        deadline = time.monotonic() + COMMAND_TIMEOUT_S
        while time.monotonic() < deadline:
            message = json.loads(self._socket.recv())
            if message.get("id") == number:
                if "error" in message:
                    raise BrowserError(f"{method} failed: {message['error']}")
                return message.get("result", {})
            self._event(message)
        raise BrowserError(f"{method}: no answer in {COMMAND_TIMEOUT_S:g} s")

    def _event(self, message: dict) -> None:
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            self.errors.append(f"exception: {text}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            self.errors.append("console.error: " + " ".join(
                str(arg.get("value", arg.get("description", ""))) for arg in params["args"]))
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            entry = params["entry"]
            if entry.get("source") == "network":
                self.failed_requests.append(f"{entry.get('url')}: {entry.get('text')}")
            else:
                self.errors.append(f"log: {entry.get('text')}")

    def navigate(self, url: str, timeout: float = 30.0) -> None:
        """
        Load C{url} and wait until its document is complete.
        """
        self.command("Page.navigate", url=url)
        self.wait_for("document.readyState === 'complete' && location.href !== 'about:blank'",
                      timeout, what=f"{url} to load")

    def evaluate(self, expression: str):
        """
        The value of JavaScript C{expression} in the page (a promise is
        awaited); its exception is raised as L{BrowserError}.
        """
        result = self.command("Runtime.evaluate", expression=expression,
                              returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            raise BrowserError(f"{expression!r} threw: "
                               f"{details.get('exception', {}).get('description') or details}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 30.0, *, what: str | None = None,
                 interval: float = 0.1):
        """
        Evaluate C{expression} until its value is truthy, and return it.

        @raise BrowserError: the deadline passed (the last value is in the
            message).
        """
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() >= deadline:
                raise BrowserError(f"timed out after {timeout:g} s waiting for "
                                   f"{what or expression} (last value {value!r})")
            time.sleep(interval)

    def screenshot(self, path: Path, full_page: bool = False) -> Path:
        """
        Save what the tab shows now as a PNG at C{path}; return C{path}.

        @param full_page: the whole page, not only the window's worth (a
            long report).
        """
        params: dict = {"format": "png"}
        if full_page:
            size = self.command("Page.getLayoutMetrics")["cssContentSize"]
            params.update(captureBeyondViewport=True, clip={
                "x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1})
        data = self.command("Page.captureScreenshot", **params)["data"]
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        self._socket.close()


class Browser:
    """
    A headless Chromium process with a throw-away profile.  Use it as a
    context manager, or call L{close}.
    """

    def __init__(self, executable: str | None = None) -> None:
        executable = executable or chromium_path()
        if executable is None:
            raise BrowserError("no chromium or chromium-browser on the PATH")
        self._profile = tempfile.mkdtemp(prefix="meshroute-chromium-")
        self._pages: list[Page] = []
        self._log = open(os.path.join(self._profile, "chromium.log"), "wb")
        self.process = subprocess.Popen(
            [executable, "--headless=new", "--no-sandbox", "--disable-gpu",
             "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
             "--disable-extensions", "--disable-background-networking",
             f"--window-size={WINDOW[0]},{WINDOW[1]}",
             f"--user-data-dir={self._profile}", "--remote-debugging-address=127.0.0.1",
             "--remote-debugging-port=0", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT)
        try:
            self.port = self._wait_port()
        except BaseException:
            self.close()
            raise

    def _wait_port(self) -> int:
        """
        The DevTools port Chromium chose, from the first line of
        C{DevToolsActivePort} once it is written whole.
        """
        path = os.path.join(self._profile, "DevToolsActivePort")
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BrowserError(f"chromium exited with {self.process.returncode}:\n"
                                   + self.log_tail())
            try:
                with open(path) as f:
                    lines = f.read().splitlines()
            except FileNotFoundError:
                lines = []
            if len(lines) >= 2:
                return int(lines[0])
            time.sleep(0.05)
        raise BrowserError(f"chromium wrote no DevToolsActivePort in {START_TIMEOUT_S:g} s:\n"
                           + self.log_tail())

    def log_tail(self, lines: int = 20) -> str:
        """
        The end of what Chromium printed.
        """
        self._log.flush()
        with open(self._log.name, errors="replace") as f:
            return "\n".join(f.read().splitlines()[-lines:])

    def _json(self, path: str, method: str = "GET"):
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", method=method)
        with urllib.request.urlopen(request, timeout=COMMAND_TIMEOUT_S) as response:
            return json.load(response)

    def open(self, url: str, timeout: float = 30.0) -> Page:
        """
        A new tab showing C{url}, loaded.
        """
        target = self._json("/json/new?about:blank", method="PUT")
        socket = websocket.create_connection(target["webSocketDebuggerUrl"],
                                             timeout=COMMAND_TIMEOUT_S, suppress_origin=True)
        page = Page(socket)
        self._pages.append(page)
        page.command("Runtime.enable")
        page.command("Log.enable")
        page.command("Page.enable")
        page.command("Emulation.setDeviceMetricsOverride", width=WINDOW[0], height=WINDOW[1],
                     deviceScaleFactor=1, mobile=False)
        page.navigate(url, timeout)
        return page

    def close(self) -> None:
        for page in self._pages:
            page.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
