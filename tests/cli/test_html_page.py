"""report html: the page rendered from synthetic reports (conftest's build_series): its
structure (charts, series per chart, trend and warm-up marks, tables), escaping of what a
report may hold, its size for a long run, and the command's files. The same pages in a real
browser: tests/integration/test_report_page_browser.py."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from hicache_cli.analysis.bundles import Bundle, load_document
from hicache_cli.analysis.compare import bundle, not_applicable_row, summarize
from hicache_cli.analysis.report import RunOutcome, build_report, load_report
from hicache_cli.analysis.results import Report
from hicache_cli.analysis.scan import not_applicable, row_from_report, scan_bundle
from hicache_cli.cli.main import main
from hicache_cli.config import StressConfig
from hicache_cli.errors import UsageError
from hicache_cli.present.html import render, write_page
from hicache_cli.present.html.run import run_details
from tests.conftest import build_pp2_report, build_series

VOID = frozenset({"meta", "img", "br", "hr", "input", "link"})  # HTML elements without an end tag
HOSTILE = "</style></script><script>alert('x')</script>\"'><img src=x onerror=alert(1)>"


class Page(HTMLParser):
    """The page's elements as (tag, attributes, the id of the chart they are in), its text,
    and the raw text of its <style> and <script>."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str], str | None]] = []
        self.text: list[str] = []
        self.raw: dict[str, list[str]] = {"style": [], "script": []}
        self._open: list[tuple[str, str | None]] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {k: v or "" for k, v in attrs}
        chart = found["id"] if tag == "figure" else (self._open[-1][1] if self._open else None)
        self.elements.append((tag, found, chart))
        if tag not in VOID:
            self._open.append((tag, chart))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        while self._open:
            if self._open.pop()[0] == tag:
                break

    def handle_data(self, data: str) -> None:
        if self._open and self._open[-1][0] in self.raw:
            self.raw[self._open[-1][0]].append(data)
        else:
            self.text.append(data)

    def all(self, tag: str, cls: str | None = None, chart: str | None = None) -> list[dict[str, str]]:
        return [
            a
            for t, a, c in self.elements
            if t == tag and (cls is None or cls in a.get("class", "").split()) and (chart is None or c == chart)
        ]

    def charts(self) -> dict[str, int]:
        """Chart id -> how many series (lines) it draws."""
        return {f["id"]: len(self.all("g", "series", f["id"])) for f in self.all("figure", "chart")}


def run_page(report: Report | dict[str, Any]) -> Page:
    return Page(render(Report.read(report) if isinstance(report, dict) else report))


# -- a run ------------------------------------------------------------------------


def test_a_leaking_run_draws_each_measure_with_a_line_per_rank() -> None:
    page = run_page(build_pp2_report(leaking=True))
    # the synthetic samples carry no anonymous-memory readings: no such chart
    assert page.charts() == {"chart-rss": 2, "chart-depth": 2, "chart-p99": 2, "chart-backlog": 1}
    assert len(page.all("path", "trend", "chart-rss")) == 2  # each rank's RSS trend
    assert len(page.all("path", "trend", "chart-depth")) == 2
    assert page.all("path", "trend", "chart-p99") == []  # no verdict rests on latency
    # every rank's warm-up ends at the same time here: one mark, and the shading before it
    assert len(page.all("line", "wm", "chart-rss")) == 1 and page.all("rect", "warm", "chart-rss")
    points = page.all("circle", chart="chart-rss")
    assert 2 * 150 <= len(points) <= 2 * 200  # thinned to at most 200 points a rank
    svg = page.all("svg", "plot", "chart-rss")[0]
    assert svg["role"] == "img" and svg["aria-labelledby"] == "chart-rss-title chart-rss-desc"


def test_the_verdict_comes_first_with_its_reason() -> None:
    report = build_pp2_report(leaking=True).to_dict()
    page = run_page(report)
    text = " ".join(page.text)
    sections = [a["id"] for a in page.all("section")]
    assert sections == ["verdicts", "charts", "figures", "run"]
    assert report["ranks"][0]["verdict_reason"] in text
    assert [a["class"] for a in page.all("span", "verdict")][:3] == [
        "verdict v-leak",
        "verdict v-leak",
        "verdict v-bounded",
    ]


def test_the_trend_is_drawn_where_the_report_puts_it() -> None:
    """rank 0's RSS climbs 50 kB/s (180 MB/h): its trend line rises by that over the run."""
    rank0 = run_page(build_pp2_report(leaking=True)).all("path", "trend", "chart-rss")[0]
    d = re.fullmatch(r"M([\d.]+) ([\d.]+)L([\d.]+) ([\d.]+)", rank0["d"])
    assert d is not None
    x0, y0, x1, y1 = map(float, d.groups())
    assert x1 > x0 and y1 < y0  # left to right, upwards (SVG's y grows down)


def test_a_traced_run_shows_live_works_and_its_sites(tmp_path: Path) -> None:
    report = build_pp2_report(leaking=True).to_dict()
    report["target"] = {"kind": "trace", "command": ["python", "leaky.py"], "cwd": "/w", "processes": 2}
    site = {"file": "/w/leaky.py", "line": 44, "function": "sync_counts", "op": "isend", "peer": 1, "created": 900,
            "waited": 0, "completed": 0, "dropped": 0, "live": 900, "live_max": 900, "live_bytes": 14400,
            "source": "work = dist.isend(count, dst=1)", "backend": "gloo",
            "polled": {"file": "/w/leaky.py", "line": 51, "function": "reap"}}  # fmt: skip
    report["ranks"][0]["works"] = {"created": 900, "waited": 0, "completed": 0, "dropped": 0, "live_final": 900,
                                   "live_max": 900, "sites": [site]}  # fmt: skip
    page = run_page(report)
    assert "live Works (Works)" in " ".join(page.text)
    text = " ".join(page.text)
    assert "leaky.py:44" in text and "sync_counts" in text and "work = dist.isend(count, dst=1)" in text
    assert "polled with is_completed() at leaky.py:51 in reap, which stays False on gloo until wait()" in text
    assert [a["id"] for a in page.all("section")] == ["verdicts", "charts", "sites", "figures", "run"]


def test_failures_name_their_stacks_file() -> None:
    report = build_pp2_report(leaking=False).to_dict()
    report["status"] = "failed"
    report["failures"] = [{"rank": 1, "kind": "hang", "message": "rank 1 blocked in recv", "exit_code": None,
                           "signal": "SIGKILL", "stack_file": "rank-1.stacks.txt", "at_s": 12.5}]  # fmt: skip
    report["root_cause"] = 1
    page = run_page(report)
    assert [a["id"] for a in page.all("section")][:2] == ["verdicts", "failures"]
    text = " ".join(page.text)
    assert "hang (root cause)" in text and "rank-1.stacks.txt" in text and "SIGKILL" in text


def test_everything_from_the_report_is_escaped() -> None:
    """A report is untrusted: its text never becomes markup, and the page's one style and one
    script stay its own."""
    report = build_pp2_report(leaking=True).to_dict()
    report["ranks"][0]["verdict_reason"] = HOSTILE
    report["ranks"][1]["verdict"] = HOSTILE
    report["config"]["policy"] = HOSTILE
    report["environment"]["host"] = HOSTILE
    report["target"] = {"kind": "trace", "command": ["python", HOSTILE], "cwd": HOSTILE}
    report["failures"] = [{"rank": 0, "kind": "error", "message": HOSTILE, "stack_file": HOSTILE}]
    report["ranks"][0]["works"] = {"sites": [{"file": HOSTILE, "line": 1, "function": HOSTILE, "op": HOSTILE,
                                              "source": HOSTILE, "live": 3}]}  # fmt: skip
    text = render(Report.read(report))
    page = Page(text)
    assert [t for t, *_ in page.elements].count("script") == 1
    assert [t for t, *_ in page.elements].count("style") == 1
    assert page.all("img") == []
    assert not [a for _, attrs, _ in page.elements for a in attrs if a.startswith("on")]
    assert text.count("</style>") == 1 and text.count("</script>") == 1
    shown = " ".join(page.text)
    assert shown.count(HOSTILE) >= 6  # shown as text, whole: reason, verdict, host, message, site...
    assert HOSTILE not in "".join(page.raw["script"]) + "".join(page.raw["style"])


def test_the_content_security_policy_admits_only_the_page_s_own_style_and_script() -> None:
    text = render(build_pp2_report())
    page = Page(text)
    (policy,) = [a["content"] for a in page.all("meta") if a.get("http-equiv") == "Content-Security-Policy"]
    rules = dict(rule.strip().split(" ", 1) for rule in policy.split(";"))
    assert rules["default-src"] == "'none'" and rules["img-src"] == "'none'"

    def digest(body: str) -> str:
        return "'sha256-" + base64.b64encode(hashlib.sha256(body.encode()).digest()).decode() + "'"

    assert rules["style-src"] == digest("".join(page.raw["style"]))
    assert rules["script-src"] == digest("".join(page.raw["script"]))


def test_a_ten_minute_pp4_run_is_well_under_two_megabytes() -> None:
    """10 minutes at 10 Hz on 4 ranks: every chart drawn, the page a few hundred kB."""
    config = StressConfig(pp=4, policy="reap", duration_s=600.0)
    runs = {r: build_series(r, n=6000, rss_per_s=50_000.0 if r < 3 else 0.0, depth_per_s=100.0 if r < 3 else 0.0,
                            sent_per_s=100.0 if r < 3 else 0.0, received_per_s=100.0 if r else 0.0)
            for r in range(4)}  # fmt: skip
    for samples in runs.values():  # anonymous memory read once a second, as the probe does
        samples[:] = [replace(s, anon_bytes=s.rss_bytes - 50_000_000 if i % 10 == 0 else None)
                      for i, s in enumerate(samples)]  # fmt: skip
    text = render(build_report(config, runs, RunOutcome(wall_s=610.0)))
    charts = Page(text).charts()
    assert charts == {"chart-rss": 4, "chart-anon": 4, "chart-depth": 4, "chart-p99": 4, "chart-backlog": 3}
    size = len(text.encode())
    print(f"page of a 10-minute pp=4 run: {size / 1024:.0f} kB")
    assert size < 2 * 1024 * 1024


# -- bundles ----------------------------------------------------------------------


def test_a_compare_bundle_draws_a_line_per_policy_and_its_table() -> None:
    reports = [build_pp2_report(leaking=True), build_pp2_report(leaking=False)]
    rows = [summarize(r) for r in reports] + [not_applicable_row("adaptive", "gloo", "its timed wait fails")]
    data = json.loads(json.dumps(bundle(reports, {"pp": 2, "tp": 1, "duration_s": 60.0}, rows)))
    page = Page(render(Bundle.read(data)))
    assert page.charts() == {"chart-rss": 2, "chart-depth": 2, "chart-p99": 2}  # adaptive did not run
    assert len(page.all("tr")) == 1 + 3  # the header, reap, drain, adaptive
    text = " ".join(page.text)
    assert "adaptive: not applicable on gloo: its timed wait fails" in text
    assert "reap (rank 0): LEAK" in text and "drain (rank 0): BOUNDED" in text


def test_a_scan_bundle_draws_a_line_per_release() -> None:
    reports = {"0.5.14": build_pp2_report(leaking=True), "0.5.15": build_pp2_report(leaking=False)}
    rows = [row_from_report(v, r) for v, r in reports.items()] + [not_applicable("0.5.13", "no PP-sync path")]
    data = json.loads(json.dumps(scan_bundle(rows, {"pp": 2, "duration": "60s", "versions": "0.5.13.."}, reports)))
    page = Page(render(Bundle.read(data)))
    assert page.charts() == {"chart-rss": 2, "chart-depth": 2, "chart-p99": 2}
    assert "Verdict changes: LEAK in 0.5.14 -> BOUNDED in 0.5.15" in " ".join(page.text)


def test_a_bundle_with_a_bad_report_names_the_field(tmp_path: Path) -> None:
    data = bundle([build_pp2_report()], {})
    del data["policies"][0]["report"]["ranks"][0]["rss"]
    path = tmp_path / "compare.json"
    path.write_text(json.dumps(data))
    with pytest.raises(UsageError, match=r"not a valid hicache compare-policies bundle: policies\[0\]\.report\.ranks"):
        load_document(path)


# -- the command ------------------------------------------------------------------


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "run"
    directory.mkdir()
    (directory / "report.json").write_text(json.dumps(build_pp2_report().to_dict()))
    return directory


def test_report_html_writes_beside_the_report_and_rewrites_its_own_page(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", "html", str(run_dir)]) == 0
    page = run_dir / "report.html"
    assert capsys.readouterr().out.strip() == f"wrote {page}"
    assert main(["report", "html", str(run_dir / "report.json")]) == 0  # its own page: written again
    assert Page(page.read_text()).charts()["chart-rss"] == 2


def test_report_html_never_writes_over_a_file_it_did_not_write(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    theirs = tmp_path / "notes.html"
    theirs.write_text("<html>my notes</html>")
    assert main(["report", "html", str(run_dir), "-o", str(theirs)]) == 2
    err = capsys.readouterr().err
    refusal = f"{theirs} exists and is not a page hicache wrote; remove it or choose another file with -o"
    assert err == f"hicache: error: {refusal}\n"
    assert theirs.read_text() == "<html>my notes</html>"


def test_report_html_of_a_bundle_directory(tmp_path: Path) -> None:
    parent = tmp_path / "compare"
    parent.mkdir()
    (parent / "compare.json").write_text(json.dumps(bundle([build_pp2_report()], {"pp": 2})))
    assert main(["report", "html", str(parent)]) == 0
    assert Page((parent / "compare.html").read_text()).charts()["chart-depth"] == 1


def test_report_html_of_something_else_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    notes = tmp_path / "notes.json"
    notes.write_text('{"kind": "notes"}')
    assert main(["report", "html", str(notes)]) == 2
    assert capsys.readouterr().err == f"hicache: error: {notes}: not a hicache report (no schema_version)\n"
    assert not (tmp_path / "notes.html").exists()


def test_write_page_is_what_a_command_calls(tmp_path: Path) -> None:
    out = write_page(build_pp2_report(), tmp_path / "run.html")
    assert out.read_text().startswith("<!DOCTYPE html>")


def test_the_run_s_target_and_configuration_read_as_text_not_json() -> None:
    """Was: the target (and any list or object) shown as raw JSON in the run's details."""
    report = load_report(Path(__file__).resolve().parents[1] / "data" / "trace-run" / "report.json")
    details = run_details(report)
    assert "{&quot;" not in details and "[&quot;" not in details  # no JSON object or list, escaped or not
    assert "<dt>target kind</dt><dd>trace</dd>" in details
    assert "<dd>torchrun --standalone --nproc-per-node 2 tests/integration/programs/leaky_p2p.py --seconds 30</dd>" in (
        details
    )
