"""hicache in the places users already look, with the real CLI and real ranks: `--json` on
stdout with the text on stderr, Prometheus metrics scraped over HTTP during a run, the
baseline gate, the GitHub step summary."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import free_port
from tests.integration.helpers import FORK, Run, hicache, popen, scrape

pytestmark = pytest.mark.slow

PROGRAMS = Path(__file__).resolve().parent / "programs"


def test_stress_json_is_the_report_on_stdout_and_text_on_stderr(reap_pp2: Run) -> None:
    said = reap_pp2.proc.stderr[-3000:]
    assert reap_pp2.proc.returncode == 0, said
    report = json.loads(reap_pp2.proc.stdout)  # the whole of stdout is one document
    assert report == json.loads((reap_pp2.run_dir / "report.json").read_text())
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    assert "hicache stress: reap" in reap_pp2.proc.stderr and "rank 0: LEAK" in reap_pp2.proc.stderr, said
    assert f"run directory: {reap_pp2.run_dir}\n" in reap_pp2.proc.stderr, said  # off a terminal, not wrapped
    assert report["environment"]["hicache_version"] == metadata.version("hicache")


def test_the_report_and_report_show_say_what_rss_was_made_of(reap_pp2: Run, tmp_path: Path) -> None:
    report = json.loads(reap_pp2.proc.stdout)
    for r in report["ranks"]:
        kinds = r["memory_kinds"]
        assert kinds["readings"] >= 4  # about once a second, and the final line
        assert 0 < kinds["anon_end_bytes"] <= r["rss"]["end_bytes"]
        assert kinds["uss_end_bytes"] > 0 and kinds["file_backed_end_bytes"] > 0
    # the kept Works are heap: PP0's anonymous memory grows with its list
    assert report["ranks"][0]["memory_kinds"]["anon_end_bytes"] > report["ranks"][0]["memory_kinds"]["anon_start_bytes"]
    shown = hicache("report", "show", str(reap_pp2.run_dir), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert any(line.startswith("rank 0 memory: anonymous ") for line in shown.stdout.splitlines())


def rank_labels(rank: int, **extra: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({"rank": str(rank), "pp_rank": str(rank), "tp_rank": "0", "node": "0", **extra}.items()))


def test_metrics_are_scraped_over_http_during_the_run(reap_pp2: Run) -> None:
    with_ranks = [s for s in reap_pp2.stress_scrapes if len(s.get("hicache_rss_bytes", {})) == 2]
    assert len(with_ranks) >= 3, f"{len(reap_pp2.stress_scrapes)} scrapes, {len(with_ranks)} with both ranks"
    first, last = with_ranks[0], with_ranks[-1]
    for name in ("hicache_rss_bytes", "hicache_work_list_depth", "hicache_rounds_total"):
        assert set(last[name]) == {rank_labels(0), rank_labels(1)}
    assert last["hicache_rss_bytes"][rank_labels(0)] > 100e6
    # reap on PP0: its work list grows scrape after scrape; PP1's stays empty
    assert last["hicache_work_list_depth"][rank_labels(0)] > first["hicache_work_list_depth"][rank_labels(0)] > 0
    assert last["hicache_work_list_depth"][rank_labels(1)] == 0
    assert last["hicache_rounds_total"][rank_labels(0)] > first["hicache_rounds_total"][rank_labels(0)]
    buckets = last["hicache_loop_latency_seconds_bucket"]
    assert buckets[rank_labels(0, le="+Inf")] > 0
    report = json.loads(reap_pp2.proc.stdout)
    assert report["ranks"][0]["work_list"]["max"] >= last["hicache_work_list_depth"][rank_labels(0)]


def test_watch_serves_the_same_metrics(reap_pp2: Run) -> None:
    with_ranks = [s for s in reap_pp2.watch_scrapes if len(s.get("hicache_work_list_depth", {})) == 2]
    assert with_ranks, f"{len(reap_pp2.watch_scrapes)} scrapes of watch's endpoint"
    assert with_ranks[-1]["hicache_work_list_depth"][rank_labels(0)] > 0
    (info,) = with_ranks[-1]["hicache_run_info"]
    assert ("run_dir", str(reap_pp2.run_dir)) in info and ("policy", "reap") in info


def test_trace_json_sends_the_programs_output_to_stderr(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    command = (sys.executable, str(PROGRAMS / "no_dist.py"), "--exit-code", "5")
    proc = hicache("trace", "--json", "--run-dir", str(run_dir), "--", *command, cwd=tmp_path)
    assert proc.returncode == 5  # the program's, as without --json
    report = json.loads(proc.stdout)
    assert report["program_exit_code"] == 5 and report["target"]["kind"] == "trace"
    assert "no_dist: hello on stdout" in proc.stderr and "no_dist: hello on stderr" in proc.stderr
    assert "hicache trace:" in proc.stderr


def assertions(doc: dict[str, Any], passed: bool | None) -> set[tuple[int | None, str]]:
    return {(a["rank"], a["name"]) for a in doc["assertions"] if a["passed"] is passed}


def test_a_rerun_of_the_baselines_configuration_passes(
    drain_pp2: Run, drain_gate: subprocess.CompletedProcess[str]
) -> None:
    """The baseline: drain_pp2's 8 s of `drain`. Its own configuration again (drain_gate):
    noise is no regression."""
    doc = json.loads(drain_gate.stdout)
    assert drain_gate.returncode == 0, drain_gate.stderr
    compared = {(r, n) for r in (0, 1) for n in ("baseline-slope", "baseline-depth", "baseline-p99")}
    assert compared <= assertions(doc, True)
    assert doc["baseline"]["report"] == str(drain_pp2.run_dir / "report.json")


def test_a_slower_loop_than_the_baseline_fails_on_the_baseline_alone(drain_pp2: Run, tmp_path: Path) -> None:
    """Rank 0 sleeping 100 ms a round (--fault, which stands for slower code under test): rank
    1's loop, waiting on it, is far slower than the baseline's; nothing else fails. As on
    GitHub Actions: annotations (on stderr, under --json) and the step summary."""
    base = drain_pp2.run_dir / "report.json"
    summary = tmp_path / "step_summary.md"
    summary.write_text("earlier step\n")
    github = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)}
    args = ("check", "--json", "--policy", "drain", "--duration", "5s", "--max-rss-slope", "1GB/h", *FORK)
    run_dir = str(tmp_path / "run")
    proc = hicache(
        *args, "--fault", "lag:0:100", "--baseline", str(base), "--run-dir", run_dir, cwd=tmp_path, env=github
    )
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["result"] == "FAIL"
    failed = assertions(doc, False)
    assert (1, "baseline-p99") in failed and {name for _, name in failed} == {"baseline-p99"}
    message = next(a["message"] for a in doc["assertions"] if (a["rank"], a["name"]) == (1, "baseline-p99"))
    assert message.startswith("rank 1 loop p99 ") and f"baseline {base}'s" in message
    assert "::error title=hicache check (drain)::rank 1 loop p99 " in proc.stderr
    text = summary.read_text()
    assert text.startswith("earlier step\n### hicache check FAIL: drain, pp=2 tp=1\n")
    assert next(line for line in text.splitlines() if line.startswith("| 1 |")).endswith("| baseline-p99 |")
    assert "- `baseline-p99`: rank 1 loop p99 " in text
    assert "FAIL  baseline-p99" in proc.stderr


def test_trace_serves_live_works_as_metrics_and_prints_json(tmp_path: Path) -> None:
    """A foreign leaky program under `trace --json --metrics-port`: its live Works scraped as
    they grow; its own stdout on stderr; the report on stdout."""
    port = free_port()
    program = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    program += [str(PROGRAMS / "leaky_p2p.py"), "--seconds", "5"]
    traced = popen("trace", "--json", "--metrics-port", str(port), "--run-dir", str(tmp_path / "run"), "--", *program,
                   cwd=tmp_path)  # fmt: skip
    scrapes = []
    while traced.poll() is None:
        if (found := scrape(port)) is not None and found.get("hicache_work_list_depth"):
            scrapes.append(found["hicache_work_list_depth"])
        time.sleep(0.3)
    stdout, stderr = traced.communicate(timeout=60)
    assert traced.returncode == 0, stderr
    report = json.loads(stdout)
    assert report["target"]["kind"] == "trace" and report["verdict"] == "LEAK"
    assert "rank 1/2: rounds=" in stderr  # the program's own stdout
    live = [s[rank_labels(0)] for s in scrapes if rank_labels(0) in s]
    assert len(live) >= 2 and live[-1] > live[0] > 0
