"""
The topology page (C{/} of the admin endpoint) in headless Chromium,
against three real routers in a ring as the lab runs them (router-a →
router-b → router-c → router-a): the page is loaded once and watched
while the mesh changes.  Screenshots go to the artifacts directory
(tests/support/browser.py: var/test-artifacts unless MESHROUTE_TEST_ARTIFACTS
says otherwise).
"""

import pytest

from support.routers import mesh  # noqa: F401 (a fixture)

RING = (("router-a", "router-b"), ("router-a", "router-c"), ("router-b", "router-c"))

#: The page polls every half second here.
PAGE = "/?interval=0.5"


def start_ring(mesh, **admin):
    """
    The lab's ring of three routers; each in delivery with both neighbours.
    """
    a = mesh.router("router-a")
    b = mesh.router("router-b")
    c = mesh.router("router-c", connect=[a])
    a.connectors = [mesh.connector(b)]
    b.connectors = [mesh.connector(c)]
    for spec in (a, b, c):
        spec.admin.update(admin)
        spec.write()
    processes = mesh.start(a, b, c)
    for process, (first, second) in zip(processes, (("router-b", "router-c"),
                                                    ("router-a", "router-c"),
                                                    ("router-a", "router-b"))):
        process.wait_delivery(first, second, timeout=30)
    return processes


def edge_stages(page) -> dict:
    """
    What the page draws: each edge's stage, and whether its line has the
    legend's colour for that stage.
    """
    return {
        tuple(pair.split("|")): value for pair, value in page.evaluate("""
            Object.fromEntries([...document.querySelectorAll('.edge')].map(edge => {
                const swatch = document.querySelector('#legend .stage-' + edge.dataset.stage);
                const line = getComputedStyle(edge.querySelector('line')).stroke;
                return [edge.dataset.a + '|' + edge.dataset.b,
                        [edge.dataset.stage,
                         swatch !== null && getComputedStyle(swatch).backgroundColor === line]];
            }))""").items()}


def reachable(page) -> dict:
    return page.evaluate("""Object.fromEntries([...document.querySelectorAll('.node')]
        .map(node => [node.dataset.router, node.dataset.reachable === 'true']))""")


@pytest.mark.timeout(180)
def test_the_page_draws_the_ring_and_a_stopped_routers_links_close(mesh, browser, artifacts):
    a_proc, b_proc, c_proc = start_ring(mesh)
    page = browser.open(a_proc.spec.admin_url + PAGE)

    page.wait_for("document.querySelectorAll('.node').length === 3 && "
                  "[...document.querySelectorAll('.edge')].filter("
                  "  edge => edge.dataset.stage === 'delivery').length === 3",
                  timeout=30, what="three routers and three links in delivery")
    assert reachable(page) == {"router-a": True, "router-b": True, "router-c": True}
    # An idle link's window is empty: the line has the delivery colour.
    assert edge_stages(page) == {pair: ["delivery", True] for pair in RING}
    assert page.evaluate("document.getElementById('links-count').textContent") == "links up: 3/3"
    assert page.evaluate("document.getElementById('routers-count').textContent") == (
        "routers: 3 (3 reachable)")
    page.screenshot(artifacts / "topology-ring.png")

    b_proc.sigstop()
    # Its neighbours close their links after five keepalive intervals;
    # router-b still advertises them, frozen: one end only, so closed.
    page.wait_for("""['router-a|router-b', 'router-b|router-c'].every(pair => {
                         const [a, b] = pair.split('|');
                         const edge = document.querySelector(
                             `.edge[data-a="${a}"][data-b="${b}"]`);
                         return edge !== null && edge.dataset.stage === 'closed';
                     })""", timeout=30, what="router-b's links drawn closed")
    assert edge_stages(page) == {("router-a", "router-b"): ["closed", True],
                                 ("router-a", "router-c"): ["delivery", True],
                                 ("router-b", "router-c"): ["closed", True]}
    page.wait_for("document.querySelector('.node[data-router=\"router-b\"]')"
                  ".dataset.reachable === 'false'", timeout=30, what="router-b unreachable")
    assert page.evaluate("document.getElementById('links-count').textContent") == "links up: 1/3"
    page.screenshot(artifacts / "topology-router-b-stopped.png")

    b_proc.sigcont()
    page.wait_for("[...document.querySelectorAll('.edge')].every("
                  "  edge => edge.dataset.stage === 'delivery')",
                  timeout=30, what="the ring back in delivery")
    assert reachable(page) == {"router-a": True, "router-b": True, "router-c": True}
    assert page.errors == []


TOKEN = "admin-token-0123456789abcdef"


def submit_token(page, token: str) -> None:
    page.evaluate(f"""document.getElementById('token').value = {token!r};
                      document.querySelector('#token-form button').click()""")


@pytest.mark.timeout(120)
def test_with_a_token_the_page_asks_for_it_once_per_tab(mesh, browser, artifacts):
    spec = mesh.router("router-a")
    token_file = spec.directory / "admin.token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    spec.admin = {"token-file": token_file}
    spec.admin_token = TOKEN
    spec.write()
    mesh.start(spec)
    page = browser.open(spec.admin_url + PAGE)

    page.wait_for("!document.getElementById('token-form').hidden", what="the token form")
    assert page.evaluate("document.querySelectorAll('.node').length") == 0
    submit_token(page, "not-the-token")
    page.wait_for("!document.getElementById('token-form').hidden && "
                  "!document.getElementById('token-refused').hidden",
                  what="the token refused")
    submit_token(page, TOKEN)
    page.wait_for("document.querySelectorAll('.node').length === 1", what="the router drawn")
    page.screenshot(artifacts / "topology-with-token.png")

    # The tab keeps it: a reload asks no more.
    page.navigate(spec.admin_url + PAGE)
    page.wait_for("document.querySelectorAll('.node').length === 1", what="the router drawn")
    assert page.evaluate("document.getElementById('token-form').hidden") is True
    assert page.errors == []
