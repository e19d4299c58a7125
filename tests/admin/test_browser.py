"""
The browser driver of the page tests (tests/support/browser.py), on pages that
need no server: what it reports is what the page did.
"""

import struct
import urllib.parse

import pytest

from support.browser import BrowserError


def data_url(html: str) -> str:
    return "data:text/html," + urllib.parse.quote(html)


def test_wait_for_sees_the_page_change_after_it_loaded(browser):
    page = browser.open(data_url(
        "<p id=p>before</p><script>"
        "setTimeout(() => { document.getElementById('p').textContent = 'after' }, 300)"
        "</script>"))

    assert page.wait_for("document.getElementById('p').textContent === 'after' && 'seen'",
                         what="the paragraph to change") == "seen"
    assert page.errors == []


def test_wait_for_reports_the_last_value_when_the_deadline_passes(browser):
    page = browser.open(data_url("<p id=p>never</p>"))

    with pytest.raises(BrowserError, match="the paragraph to change.*last value ''"):
        page.wait_for("document.getElementById('p').textContent === 'changed' ? 'yes' : ''",
                      timeout=0.5, what="the paragraph to change")


def test_exceptions_and_console_errors_are_collected(browser):
    page = browser.open(data_url(
        "<script>console.error('bad thing'); setTimeout(() => { null.x }, 0)</script>"))

    page.wait_for("true")
    page.wait_for("new Promise(done => setTimeout(() => done(true), 100))")
    assert any("bad thing" in error for error in page.errors), page.errors
    assert any("exception" in error and "null" in error for error in page.errors), page.errors
    with pytest.raises(BrowserError, match="threw"):
        page.evaluate("undefined_name")


def test_a_screenshot_is_a_png_of_the_window(browser, tmp_path):
    page = browser.open(data_url("<body style='background: #08f'>blue</body>"))

    path = page.screenshot(tmp_path / "blue.png")

    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1280, 800)


def test_failed_requests_are_collected_apart_from_errors(browser):
    page = browser.open(data_url("<img src='http://127.0.0.1:9/nothing.png'>"))

    page.wait_for("new Promise(done => setTimeout(() => done(true), 200))")
    assert page.errors == []
    [failed] = page.failed_requests
    assert failed.startswith("http://127.0.0.1:9/nothing.png: "), failed


def test_a_full_page_screenshot_is_as_tall_as_the_page(browser, tmp_path):
    page = browser.open(data_url("<body style='margin: 0'><div style='height: 2000px'>tall"
                                 "</div></body>"))

    data = page.screenshot(tmp_path / "tall.png", full_page=True).read_bytes()

    width, height = struct.unpack(">II", data[16:24])
    # The page's width: the window's, less a vertical scroll bar.
    assert height == 2000 and 1200 < width <= 1280, (width, height)
