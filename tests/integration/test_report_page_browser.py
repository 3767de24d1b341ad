"""`report html` pages in a real browser: headless Chromium (tests/browser.py) opens each page
with every request intercepted, and the page must render its charts with the right number of
lines, say nothing on the console, ask for nothing beyond itself, answer a hover and the
keyboard with values, and print. Each page's screenshot is kept in pytest's tmp dir."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hicache_cli.analysis.bundles import Bundle
from hicache_cli.analysis.compare import bundle, summarize
from hicache_cli.analysis.results import Report
from hicache_cli.present.html import write_page
from tests.browser import Chromium, find_chromium
from tests.cli.test_html_page import HOSTILE
from tests.conftest import build_pp2_report
from tests.integration.helpers import Run, hicache

CHROMIUM = find_chromium()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        CHROMIUM is None,
        reason="no Chromium to test the page in (Debian: apt-get install chromium; scripts/setup.sh installs it "
        "when run as root)",
    ),
]

SERIES_PER_CHART = "Object.fromEntries([...document.querySelectorAll('figure.chart')].map(f => [f.id, f.querySelectorAll('g.series').length]))"  # noqa: E501
CHART_BOX = "(() => {{ const r = document.querySelector('#{} svg').getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; }})()"  # noqa: E501
TIP = "[document.getElementById('tip').hidden, document.getElementById('tip').textContent]"


@pytest.fixture(scope="module")
def browser() -> Chromium:
    with Chromium(CHROMIUM) as chromium:  # type: ignore[arg-type]
        yield chromium


def open_page(browser: Chromium, page: Path, shot: Path) -> dict[str, int]:
    log = browser.open(page)
    charts = browser.evaluate(SERIES_PER_CHART)
    browser.screenshot(shot)
    print(f"screenshot: {shot}")
    assert log.errors == []
    assert log.requests == [page.resolve().as_uri()] and log.refused == []  # nothing but the page itself
    return charts


def test_a_run_page_renders_offline_with_a_line_per_rank(browser: Chromium, tmp_path: Path) -> None:
    data = build_pp2_report(leaking=True).to_dict()
    data["ranks"][0]["verdict_reason"] += " " + HOSTILE  # an injected script would log, or ask for x
    page = write_page(Report.from_dict(data), tmp_path / "run.html")
    charts = open_page(browser, page, tmp_path / "run.png")
    assert charts == {"chart-rss": 2, "chart-depth": 2, "chart-p99": 2, "chart-backlog": 1}

    left, top, width, height = browser.evaluate(CHART_BOX.format("chart-depth"))
    browser.move_pointer(left + width * 0.9, top + height / 2)
    hidden, text = browser.evaluate(TIP)
    assert not hidden
    leak, flat = text.splitlines()
    assert leak.startswith("rank 0 (pp 0): LEAK, ") and leak.endswith(" Works")
    assert flat.startswith("rank 1 (pp 1): BOUNDED, ") and flat.endswith(": 0 Works")
    browser.move_pointer(2, 2)
    assert browser.evaluate(TIP)[0] is True  # gone once the pointer leaves

    browser.evaluate("document.querySelector('#chart-rss svg').focus()")
    browser.send("Input.dispatchKeyEvent", {"type": "keyDown", "key": "ArrowRight", "code": "ArrowRight"})
    hidden, text = browser.evaluate(TIP)
    assert not hidden and text.splitlines()[0].startswith("rank 0 (pp 0): LEAK, 0.1 s: ")  # the first point

    assert browser.pdf().startswith(b"%PDF")
    assert browser.log.errors == []


def test_a_compare_page_has_a_line_per_policy(browser: Chromium, tmp_path: Path) -> None:
    reports = [build_pp2_report(leaking=True), build_pp2_report(leaking=False)]
    data = json.loads(json.dumps(bundle(reports, {"pp": 2, "tp": 1}, [summarize(r) for r in reports])))
    page = write_page(Bundle.read(data), tmp_path / "compare.html")
    charts = open_page(browser, page, tmp_path / "compare.png")
    assert charts == {"chart-rss": 2, "chart-depth": 2, "chart-p99": 2}


def test_the_harness_sees_a_request_that_leaves_a_page(browser: Chromium, tmp_path: Path) -> None:
    """The check above can fail: a page that asks for an image elsewhere is caught asking."""
    page = tmp_path / "leaky.html"
    page.write_text('<!DOCTYPE html><html><body><img src="http://192.0.2.1/x.png" alt=""></body></html>')
    log = browser.open(page)
    assert "http://192.0.2.1/x.png" in log.refused


DEPTHS = (
    "Object.fromEntries([...document.querySelectorAll('#chart-depth g.series')].map(g => [g.dataset.name,"
    " [...g.querySelectorAll('circle title')].map(t => +t.textContent.split(': ').pop().split(' ')[0]"
    ".replace(/,/g, ''))]))"
)


def test_real_runs_pages_show_the_leak_climb_and_the_fix_flat(
    browser: Chromium, reap_pp2: Run, drain_pp2: Run, tmp_path: Path
) -> None:
    """`hicache report html` on real runs, read as the page shows them (each point's value):
    reap's rank 0 climbs while rank 1 stays at 0; under drain no work list holds more than
    one round's sends."""
    pages = {}
    for run, name in ((reap_pp2, "reap"), (drain_pp2, "drain")):
        proc = hicache("report", "html", str(run.run_dir), cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        charts = open_page(browser, run.run_dir / "report.html", tmp_path / f"{name}.png")
        assert charts["chart-rss"] == charts["chart-depth"] == 2
        pages[name] = {label.split(":")[0]: depths for label, depths in browser.evaluate(DEPTHS).items()}
    climbing, flat = pages["reap"]["rank 0 (pp 0)"], pages["reap"]["rank 1 (pp 1)"]
    assert climbing[-1] > climbing[0] + 1000 and max(climbing) == climbing[-1]
    assert set(flat) == {0}
    assert all(max(depths) <= 2 for depths in pages["drain"].values())
