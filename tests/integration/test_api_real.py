"""The library API end to end: the docs' snippet as it stands, a CLI-written report read
back, callbacks and early stop, a traced program, and Ctrl-C, with real torchrun ranks."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import hicache_cli as hc
from tests.integration.helpers import REPO, Run, sigint_as_at_a_terminal

pytestmark = pytest.mark.slow

PROGRAMS = Path(__file__).resolve().parent / "programs"


def run_python(code: str, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_the_snippet_in_the_api_docs_runs_and_finds_the_leak(tmp_path: Path) -> None:
    snippet = re.search(r"```python\n(.*?)```", (REPO / "docs" / "api.md").read_text(), re.S)
    assert snippet is not None
    done = run_python(snippet.group(1), tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "completed LEAK"
    assert len(list((tmp_path / "hicache-runs").glob("*-reap/report.json"))) == 1


def test_a_report_the_cli_wrote_reads_back_typed_and_round_trips(reap_pp2: Run) -> None:
    path = reap_pp2.run_dir / "report.json"
    report = hc.load_report(path)
    assert report.to_dict() == json.loads(path.read_text())
    assert json.dumps(report.to_dict(), indent=2) + "\n" == path.read_text()  # byte for byte
    assert hc.load_report(reap_pp2.run_dir).path == path  # a run directory names its report
    assert report.status == hc.Status.COMPLETED and report.verdict == "LEAK"
    rank0 = report.rank(0)
    assert rank0.verdict is hc.Verdict.LEAK
    assert rank0.work_list.final == reap_pp2.report["ranks"][0]["work_list"]["final"] > 1000
    assert rank0.loop_latency.p99 == reap_pp2.report["ranks"][0]["loop_latency_ms"]["p99"]
    assert report.config == hc.RunConfig.from_dict(reap_pp2.report["config"])
    # rank 1 may leak too (the messages it has not received pile up); the typed list is the JSON's
    expected = [r["rank"] for r in reap_pp2.report["ranks"] if r["verdict"] == "LEAK"]
    assert [r.rank for r in report.leaking_ranks] == expected and 0 in expected


def test_samples_follow_the_run_and_the_settler_stops_it_early(tmp_path: Path) -> None:
    config = hc.StressConfig(pp=2, policy="reap", duration_s=120.0, launcher="fork", round_time_s=0.002)
    seen: list[float] = []
    started = time.monotonic()
    report = hc.run(config, run_dir=tmp_path / "run", early_stop=hc.Settler(config),
                    on_samples=lambda samples, elapsed: seen.append(elapsed))  # fmt: skip
    assert time.monotonic() - started < 100  # not the 120 s asked for
    assert report.status == "completed"
    assert report.stopped_early is not None and report.stopped_early.startswith("LEAK settled after")
    assert report.path == tmp_path / "run" / "report.json"
    assert len(seen) > 5 and seen == sorted(seen)


def test_a_traced_program_through_the_api_names_its_isend_line(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               str(PROGRAMS / "leaky_p2p.py"), "--seconds", "5"]  # fmt: skip
    report = hc.trace(command, run_dir=tmp_path / "run", capture_output=True)
    assert report.program_exit_code == 0
    assert "rank 0/2" in (tmp_path / "run" / "program.log").read_text()
    rank0 = report.rank(0)
    assert rank0.verdict == hc.Verdict.LEAK
    top = rank0.works.sites[0]
    assert (Path(top.file).name, top.function, top.op, top.peer) == ("leaky_p2p.py", "sync_counts", "isend", 1)
    assert top.live > 1000 and top.waited == 0


def test_ctrl_c_during_a_run_gives_an_interrupted_report_not_an_exception(tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        import hicache_cli as hc
        report = hc.run(hc.StressConfig(pp=2, policy="drain", duration_s=120.0, launcher="fork", round_time_s=0.002),
                        run_dir="run")
        print(report.status, (report.interruption.signal, report.interruption.to), flush=True)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(REPO)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=sigint_as_at_a_terminal)  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while not list((tmp_path / "run").glob("rank-*.jsonl")) and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(2.0)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert out.strip() == "interrupted ('SIGINT', 'hicache')"
