"""
C{meshroute status}: a running router's identity and links, or one view
of it, of another router through it, or of every router, read from its
admin API.
"""

import getopt
import http.client
import json
import os
import re
import ssl
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from twisted.python import usage

from meshroute.cli.command_options import CommandOptions
from meshroute.cli.status_views import VIEWS as STATUS_VIEWS
from meshroute.cli.status_views import format_view, last_topology_change
from meshroute.config import load_config
from meshroute.errors import ConfigError
from meshroute.security.files import read_private

#: Where admin API commands find the token when no --token-file is given.
ADMIN_TOKEN_VARIABLE = "MESHROUTE_ADMIN_TOKEN"


class StatusOptions(CommandOptions):
    synopsis = ("(--admin URL | CONFIG) [VIEW] [--router NAME | --all-routers] [--json] "
                "[--token-file FILE] [--ca-file PEM]")
    longdesc = ("Show a running router's identity and links, or one VIEW of it: "
                f"{', '.join(STATUS_VIEWS)}; from its admin API, found with --admin or in "
                "the router's CONFIG file ([admin] endpoint).  --router NAME shows router "
                "NAME instead, asked through the mesh; --all-routers gathers the view from "
                "every router known.  A router with [admin] token-file wants its token: "
                "from --token-file (a file only you may read), the environment variable "
                f"{ADMIN_TOKEN_VARIABLE}, or CONFIG's token-file; never from the command "
                "line.  Exit status 1 when the router (or NAME) cannot be read.")
    optParameters = [
        ["admin", "a", None, "The router's admin base URL, e.g. http://127.0.0.1:8001"],
        ["router", "r", None, "Show this router, asked through the mesh."],
        ["token-file", None, None, "The file holding the admin API's bearer token."],
        ["ca-file", None, None,
         "For an https URL: the CA certificates (PEM) to verify the router's with, "
         "instead of the system's."],
    ]
    optFlags = [["json", None, "Print the raw JSON instead of a table."],
                ["all-routers", None, "Gather the view from every router known."]]

    def __init__(self) -> None:
        super().__init__()
        self["view"] = None
        self["config"] = None

    def parseOptions(self, options=None) -> None:
        # An operator writes the VIEW first (meshroute status links
        # --router NAME), which getopt does not allow: options go first.
        try:
            found, args = getopt.gnu_getopt(list(options or []), self.shortOpt, self.longOpt)
        except getopt.GetoptError as e:
            raise usage.UsageError(str(e)) from None
        takes_value = {f"--{name[:-1]}" for name in self.longOpt if name.endswith("=")}
        takes_value |= {f"-{letter}" for letter, colon
                        in zip(self.shortOpt, self.shortOpt[1:] + " ") if colon == ":"}
        ordered = [token for option, value in found
                   for token in ((option, value) if option in takes_value else (option,))]
        super().parseOptions([*ordered, "--", *args])

    def parseArgs(self, *args: str) -> None:
        for arg in args:
            if arg in STATUS_VIEWS and self["view"] is None:
                self["view"] = arg
            elif self["config"] is None and (os.path.sep in arg or arg.endswith(".toml")
                                             or os.path.exists(arg)):
                self["config"] = arg
            else:
                raise usage.UsageError(
                    f"{arg!r} is neither a view ({', '.join(STATUS_VIEWS)}) nor a "
                    "configuration file")

    def postOptions(self) -> None:
        if bool(self["admin"]) == bool(self["config"]):
            raise usage.UsageError("give the router's --admin URL or its CONFIG file (one)")
        if self["router"] and self["all-routers"]:
            raise usage.UsageError("--router and --all-routers exclude each other")
        if self["all-routers"] and self["view"] is None:
            raise usage.UsageError(f"--all-routers needs a VIEW ({', '.join(STATUS_VIEWS)})")


def admin_token(options) -> bytes | None:
    """
    The admin token: the contents of C{--token-file}, else the
    environment's C{MESHROUTE_ADMIN_TOKEN}, else None.

    @raise ConfigError: the token file cannot be read, or others may.
    """
    if options["token-file"]:
        return read_private(options["token-file"]).strip("\r\n").encode("utf-8")
    token = os.environ.get(ADMIN_TOKEN_VARIABLE)
    return token.encode("utf-8") if token else None


def fetch_json(base: str, path: str, token: bytes | None = None, cafile: str | None = None,
               timeout: float = 5.0, answer_headers: dict | None = None):
    """
    GET C{base + path} and decode its JSON.

    @param token: sent as C{Authorization: Bearer TOKEN}.
    @param cafile: the CA certificates an https router's certificate is
        verified with (the system's by default).
    @param timeout: seconds to wait for the answer.
    @param answer_headers: if given, filled with the answer's headers
        (lower-case names).
    @raise ValueError: the answer is not an admin API's (not HTTP, or not
        JSON), or the API refused (its error code and detail).
    @raise OSError: no answer (C{urllib.error.URLError} is one).
    """
    request = urllib.request.Request(base.rstrip("/") + path)
    if token is not None:
        request.add_header("Authorization", "Bearer " + token.decode("utf-8"))
    context = ssl.create_default_context(cafile=cafile) if cafile else None
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            if answer_headers is not None:
                answer_headers.update((k.lower(), v) for k, v in response.headers.items())
            return json.load(response)
    except urllib.error.HTTPError as e:
        try:
            answer = json.load(e)
        except ValueError:
            raise e from None
        raise ValueError(f"{e.code} {answer.get('error')}: {answer.get('detail')}") from None
    except http.client.HTTPException as e:
        raise ValueError(f"not an HTTP server, or not a meshroute admin API "
                         f"({type(e).__name__}: {str(e).strip()[:80]!r})") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"not a meshroute admin API (the answer is not JSON: {e})") from None


def format_links(router: dict, links: list[dict]) -> str:
    """
    The human-readable status table.
    """
    lines = [f"router {router['name']} (meshroute {router['version']}, up {router['uptime_s']:.0f} s)"]
    # Where each listener's port is bound (an older router does not say).
    lines += [f"  listening on {listener['address']} ({listener['key']})"
              for listener in router.get("listeners", ()) if listener["address"] is not None]
    ha = router.get("ha")
    if ha is not None:
        lag = "-" if ha["lag"] is None else ha["lag"]
        peer = "connected" if ha["peer"]["connected"] else "not connected"
        lines.append(
            f"  ha: {ha['role']}, {ha['state']}, epoch {ha['epoch']}, position "
            f"{ha['position']['epoch']}/{ha['position']['position']}, lag {lag}, peer {peer}"
            + ("" if router.get("serving", True) else "; not serving"))
        if ha["peer"].get("refusal"):
            lines.append(f"  ha: the pair is refused: {ha['peer']['refusal']}")
        if not router.get("serving", True):
            # An HA instance that is not the active one has no router to
            # show links of (its admin API answers not-active for them).
            return "\n".join(lines) + "\n"
    if not links:
        lines.append("  no links")
    header = f"  {'peer':<16} {'direction':<10} {'stage':<15} {'keepalive':>10} {'counter':>8}"
    if links:
        lines.append(header)
    for link in links:
        interval = link["keepalive_interval_ms"]
        counter = link["keepalive_counter"]
        lines.append(
            f"  {link['peer'] or '?':<16} {link['direction']:<10} {link['stage']:<15} "
            f"{str(interval) + ' ms' if interval else '-':>10} "
            f"{counter if counter is not None else '-':>8}"
        )
    return "\n".join(lines) + "\n"


#: How long C{meshroute status} waits for a view asked through the mesh:
#: longer than the router waits for the answer, so that its own
#: C{unreachable} comes back rather than a timeout here.
ROUTED_TIMEOUT_S = 15.0


def admin_url(config) -> str:
    """
    The base URL of the admin API a router's configuration sets up
    (C{[admin] endpoint}), for reaching it on this host.

    @raise ConfigError: it has none, or one this command cannot reach
        (a UNIX socket).
    """
    if config.admin is None:
        raise ConfigError(config.path, "admin.endpoint",
                          "this router has no [admin] section: no admin API to ask")
    endpoint = config.admin.endpoint
    kind, _, rest = endpoint.partition(":")
    parts = [part.replace("\\:", ":") for part in re.split(r"(?<!\\):", rest)]
    fields = dict(part.split("=", 1) for part in parts if "=" in part)
    port = next((part for part in parts if "=" not in part), fields.get("port"))
    if kind not in ("tcp", "ssl") or port is None:
        raise ConfigError(config.path, "admin.endpoint",
                          f"{endpoint!r}: meshroute status reaches tcp: and ssl: admin "
                          "endpoints only; use --admin URL")
    host = fields.get("interface", "127.0.0.1")
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    if ":" in host:
        host = f"[{host}]"
    return f"{'https' if kind == 'ssl' else 'http'}://{host}:{port}"


def _status_access(options) -> tuple[str, bytes | None]:
    """
    The admin base URL C{meshroute status} asks, and the token it shows.

    @raise ConfigError: the configuration or the token cannot be read.
    """
    token = admin_token(options)
    if options["admin"]:
        return options["admin"], token
    config = load_config(options["config"])
    return admin_url(config), token if token is not None else config.admin.token


def _view_path(view: str, router: str | None) -> str:
    return f"/api/v1/routers/{router}/{view}" if router else f"/api/v1/{view}"


def _truncation_note(router: str, headers: dict) -> str:
    kept_total = headers.get("x-meshroute-truncated")
    if not kept_total:
        return ""
    kept, _, total = kept_total.partition("/")
    return (f"  ({router} answered {kept} of its {total} rows: the answer was cut to fit "
            "a message)\n")


def status(options, out) -> int:
    """
    C{meshroute status}: today's one screen (identity and links), or one
    view, of the router asked, of another through it, or of every router.
    """
    try:
        base, token = _status_access(options)
    except ConfigError as e:
        print(f"meshroute: {e}", file=sys.stderr)
        return 1
    view, router = options["view"], options["router"]
    routed = bool(router) or options["all-routers"]

    def fetch(path, headers=None):
        if not routed:
            return fetch_json(base, path, token, options["ca-file"])
        return fetch_json(base, path, token, options["ca-file"], timeout=ROUTED_TIMEOUT_S,
                          answer_headers=headers)

    where = f"{router} through {base}" if router else base
    try:
        if options["all-routers"]:
            return _status_of_all(fetch, view, options["json"], out)
        if view is None:
            info = fetch(_view_path("router", router))
            serving = info.get("serving", True) or "ha" not in info
            links = fetch(_view_path("links", router)) if serving else []
        else:
            headers: dict = {}
            rows = fetch(_view_path(view, router), headers)
    except (urllib.error.URLError, OSError, ValueError) as e:
        print(f"meshroute: cannot read {where}: {e}", file=sys.stderr)
        return 1
    if view is None:
        if options["json"]:
            out.write(json.dumps({"router": info, "links": links}, indent=1) + "\n")
        else:
            out.write(format_links(info, links))
        return 0
    if options["json"]:
        out.write(json.dumps(rows, indent=1) + "\n")
        return 0
    now = time.time()
    if view == "routers":
        out.write(last_topology_change(rows, now))
    out.write(format_view(view, {router or "": rows}, now))
    out.write(_truncation_note(router or "the router", headers))
    return 0


def _status_of_all(fetch, view: str, as_json: bool, out) -> int:
    """
    C{meshroute status VIEW --all-routers}: the view of every router the
    asked one knows, asked at once; one table with a router column, the
    routers that did not answer listed below it (exit status 0: the
    asked router answered).
    """
    names = [row["name"] for row in fetch("/api/v1/routers")]

    def ask(name: str):
        headers: dict = {}
        try:
            return fetch(_view_path(view, name), headers), headers
        except (urllib.error.URLError, OSError, ValueError) as e:
            return e, headers

    with ThreadPoolExecutor(max_workers=min(8, len(names))) as pool:
        answers = dict(zip(names, pool.map(ask, names)))
    if as_json:
        out.write(json.dumps(
            {name: rows if not isinstance(rows, Exception)
             else {"error": "unreachable", "detail": str(rows)}
             for name, (rows, _) in answers.items()}, indent=1) + "\n")
        return 0
    now = time.time()
    out.write(format_view(view, {name: rows for name, (rows, _) in answers.items()
                                 if not isinstance(rows, Exception)}, now,
                          router_column=True))
    for name, (rows, headers) in answers.items():
        if isinstance(rows, Exception):
            out.write(f"  {name}: unreachable ({rows})\n")
        else:
            out.write(_truncation_note(name, headers))
    return 0
