"""`--html FILE` on a real run: two gloo ranks under reap for 3 s, the page written at the end
by the real CLI in a subprocess. The option's plumbing on synthetic runs:
tests/cli/test_html_option.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hicache_cli.analysis.report import load_report
from hicache_cli.present.html import render
from tests.cli.test_html_page import Page
from tests.integration.helpers import FORK, hicache

pytestmark = pytest.mark.slow


def test_a_real_run_writes_its_page_at_the_end(tmp_path: Path) -> None:
    run_dir, out = tmp_path / "run", tmp_path / "out.html"
    args = ["--pp", "2", "--policy", "reap", "--duration", "3s", "--no-live", "--run-dir", str(run_dir)]
    proc = hicache("stress", *args, *FORK, "--html", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-2:] == [f"report: {run_dir / 'report.json'}", f"html: {out}"]

    text = out.read_text()
    page = Page(text)
    # self-contained: nothing loaded from elsewhere, and a policy that allows nothing else
    assert [a for tag, a, _ in page.elements if tag != "a" and ({"src", "href"} & a.keys())] == []
    policy = next(a["content"] for tag, a, _ in page.elements if a.get("http-equiv") == "Content-Security-Policy")
    assert "default-src 'none'" in policy

    # the verdicts are this run's, rank by rank, and every rank is drawn
    report = json.loads((run_dir / "report.json").read_text())
    verdicts = [report["verdict"]] + [r["verdict"] for r in report["ranks"]]  # the run's in the header
    badges = [a["class"] for a in page.all("span", "verdict")]
    assert badges[: len(verdicts)] == [f"verdict v-{v.lower()}" for v in verdicts]
    assert "Verdict per rank" in " ".join(page.text)
    assert page.charts()["chart-rss"] == 2 and page.charts()["chart-depth"] == 2
    # the very page `hicache report html` draws from the report the run wrote
    assert text == render(load_report(run_dir / "report.json"))
