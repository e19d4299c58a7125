"""
The audit's report.html as a person sees it, in headless Chromium: an
audit of a mesh with every kind of trouble and an HA pair that failed
over; the page lays out within the window, every plot has a size, the
failovers are on it, nothing throws.  The screenshot is saved as a test
artifact (var/test-artifacts/audit-report.png).
"""

import pytest

from support.spark import spark  # noqa: F401 (a fixture)
from support.audit_testing import audit
from support.audit_meshes import pair_logs, synthetic_mesh

from meshroute.audit.running import EXIT_BROKEN_PROMISES

PLOT_SIZES = """
[...document.querySelectorAll('svg')].map(svg => {
    const box = svg.getBoundingClientRect();
    return [box.width, box.height];
})
"""

SECTION_TEXT = """
(title => {
    const heading = [...document.querySelectorAll('h2')].find(h => h.textContent === title);
    return heading ? heading.nextElementSibling.innerText : null;
})
"""


@pytest.mark.timeout(1200)
def test_the_report_in_chromium(spark, browser, artifacts, tmp_path):  # noqa: F811
    logs = tmp_path / "logs"
    synthetic_mesh(logs / "mesh")
    pair_logs(logs / "ha")
    code, _, stderr, summary = audit(spark, [logs], tmp_path / "audit")
    assert code == EXIT_BROKEN_PROMISES, stderr
    assert summary["ha"]["failovers"] == 2
    page = browser.open((tmp_path / "audit" / "report.html").as_uri())
    page.wait_for("document.querySelectorAll('svg').length > 0", what="the plots")
    page.screenshot(artifacts / "audit-report.png")
    sizes = page.evaluate(PLOT_SIZES)
    assert len(sizes) >= 3, "counts per route, a latency plot per route, the timeline"
    assert all(width > 0 and height > 0 for width, height in sizes), sizes
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), \
        page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    failovers = page.evaluate(f"{SECTION_TEXT}('HA failovers')")
    assert "takeover" in failovers and "handover" in failovers and "3900" in failovers
    assert page.errors == []
