"""`hicache lint` as users run it: the real CLI in a subprocess, on our fixture programs, on the
installed torch's own distributed code, and on SGLang releases through the wheel cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch.distributed

from tests.lint.conftest import line_of
from tests.lint.test_formats import check_sarif_for_github
from tests.lint.test_kept_never_waited import SGLANG_0_5_14, SGLANG_0_5_15

REPO = Path(__file__).resolve().parents[2]
PROGRAMS = REPO / "tests" / "integration" / "programs"
TORCH_DISTRIBUTED = Path(torch.distributed.__file__).parent
ISEND = line_of(SGLANG_0_5_14, "torch.distributed.isend(")  # the finding's line in leaky.py
COLUMN = SGLANG_0_5_14.splitlines()[ISEND - 1].index("torch.distributed.isend(") + 1  # 1-based, as editors count
STORE = line_of(SGLANG_0_5_14, ".append(send_work)")


def hicache_lint(*args: str, cwd: Path = REPO, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hicache_cli", "lint", *args],
        cwd=cwd,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "leaky.py").write_text(SGLANG_0_5_14, encoding="utf-8")
    (tmp_path / "fixed.py").write_text(SGLANG_0_5_15, encoding="utf-8")
    (tmp_path / "notes.txt").write_text("hello\n", encoding="utf-8")
    (tmp_path / "broken.py").write_text("import torch.distributed as dist\ndef f(:\n", encoding="utf-8")
    return tmp_path


def test_findings_exit_1_as_plain_lines(work: Path) -> None:
    done = hicache_lint("leaky.py", "fixed.py", cwd=work)
    assert done.returncode == 1, done.stderr
    [line] = done.stdout.splitlines()
    assert line.startswith(
        f"leaky.py:{ISEND}:{COLUMN}: HC001 the Work from isend is kept in self.work_list (line {STORE})"
    )
    assert "\x1b[" not in done.stdout  # not a terminal: no colours
    assert done.stderr.splitlines()[-1].startswith("hicache lint: 1 finding (HC001 1) in 2 files (2 analysed)")


def test_clean_code_exits_0(work: Path) -> None:
    done = hicache_lint("fixed.py", cwd=work)
    assert (done.returncode, done.stdout) == (0, "")


def test_bad_input_is_one_line_each_and_the_rest_is_linted(work: Path) -> None:
    done = hicache_lint("missing.py", "notes.txt", "broken.py", "leaky.py", cwd=work)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    errors = [ln for ln in done.stderr.splitlines() if ln.startswith("hicache: error: ")]
    assert errors == [
        "hicache: error: missing.py: no such file or directory",
        "hicache: error: notes.txt: not a Python file (lint reads .py files)",
        "hicache: error: broken.py: does not parse: invalid syntax (line 2)",
    ]
    assert done.stdout.startswith(f"leaky.py:{ISEND}:{COLUMN}: HC001 ")  # the readable file was still linted


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--format", "xml"],
            "hicache: error: --format: unknown format 'xml'; choose one of: text, json, sarif, github",
        ),
        (
            ["--select", "HC9"],
            "hicache: error: --select: unknown rule HC9; rules: HC001, HC002, HC003, HC004, HC005, all",
        ),
        (["-o", "no/such/dir/out.sarif"], "hicache: error: --output no/such/dir/out.sarif: directory no/such/dir"),
    ],
)
def test_bad_options_are_one_line(work: Path, args: list[str], message: str) -> None:
    done = hicache_lint("leaky.py", *args, cwd=work)
    assert done.returncode == 2
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith(message)


def test_json_and_sarif_on_stdout_and_to_a_file(work: Path) -> None:
    done = hicache_lint("leaky.py", "--format", "json", cwd=work)
    assert done.returncode == 1
    assert [f["rule"] for f in json.loads(done.stdout)["findings"]] == ["HC001"]
    done = hicache_lint("leaky.py", "--format", "sarif", "--output", "lint.sarif", cwd=work)
    assert (done.returncode, done.stdout) == (1, "")
    log = json.loads((work / "lint.sarif").read_text(encoding="utf-8"))
    check_sarif_for_github(log)
    assert log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "leaky.py"


def test_github_annotations(work: Path) -> None:
    done = hicache_lint("leaky.py", "--format", "github", cwd=work)
    assert done.returncode == 1
    props = f"file=leaky.py,line={ISEND},endLine={ISEND + 2},col={COLUMN},title=HC001 work-kept-never-waited"
    assert done.stdout.startswith(f"::error {props}::")


def test_help_lists_the_rules() -> None:
    done = hicache_lint("--help")
    assert done.returncode == 0
    for rule in ("HC001", "HC002", "HC003", "HC004", "HC005"):
        assert rule in done.stdout
    # the pyproject table is printed, not eaten as rich markup
    assert "[tool.hicache.lint]" in " ".join(done.stdout.replace("│", " ").split())


def test_our_leaky_programs_are_found_and_the_draining_ones_are_not() -> None:
    done = hicache_lint(str(PROGRAMS), "--format", "json")
    found = {(Path(f["file"]).name, f["rule"]) for f in json.loads(done.stdout)["findings"]}
    # telemetry_stream.py keeps its send Works in a deque(maxlen=8) and never waits them: found
    # (its flow-controlled mode bounds the messages, not what is kept unwaited); lone_rank.py
    # (the process another user runs in the attach tests) keeps its all_reduce Works unwaited;
    # gradnorm_trainer.py is not: its flush() waits the list it keeps (that no epoch ever ends
    # is a runtime fact, which attach --follow and trace find and lint cannot)
    assert found == {("leaky_p2p.py", "HC001"), ("batch_leak.py", "HC001"), ("telemetry_stream.py", "HC001"),
                     ("lone_rank.py", "HC001")}  # fmt: skip
    assert done.returncode == 1


def test_torch_pipelining_waits_its_works() -> None:
    done = hicache_lint(str(TORCH_DISTRIBUTED / "pipelining"), "--select", "all")
    assert (done.returncode, done.stdout) == (0, ""), done.stderr


def test_the_whole_torch_distributed_tree_is_clean() -> None:
    """Measured in docs/lint.md: no Work is kept unwaited. Read as one program, ZeRO's overlap
    hook (ddp_zero_hook.py) keeps its broadcasts in `_OverlapInfo.broadcast_handles`, which
    zero_redundancy_optimizer.py drains with a wait() of no timeout: HC002, when selected; and
    `_coalescing_manager` keeps its group's coalesced Work (a ProcessGroup method's) in
    `_CoalescingManager.works`, which `_CoalescingManager.wait` drains the same way."""
    done = hicache_lint(str(TORCH_DISTRIBUTED))
    assert (done.returncode, done.stdout) == (0, ""), done.stderr
    done = hicache_lint(str(TORCH_DISTRIBUTED), "--select", "all", "--format", "json")
    found = [(Path(f["file"]).name, f["rule"], f["function"]) for f in json.loads(done.stdout)["findings"]]
    assert found == [
        ("distributed_c10d.py", "HC002", "_CoalescingManager.wait"),
        ("zero_redundancy_optimizer.py", "HC002", "_OverlapInfo.wait_for_broadcasts"),
    ]


# --- SGLang releases, through the same wheel cache as --target (fetched once, then offline) ---


def lint_release(version: str, *args: str) -> subprocess.CompletedProcess[str]:
    done = hicache_lint(f"sglang=={version}", *args)
    if done.returncode == 2 and "could not" in done.stderr:
        pytest.skip(f"sglang {version}'s wheel cannot be fetched here: {done.stderr.strip().splitlines()[-1]}")
    return done


def test_sglang_0_5_14_is_flagged_in_its_hicache_files() -> None:
    done = lint_release("0.5.14")
    assert done.returncode == 1, done.stderr
    flagged = [line.split(": HC001 ")[0].rsplit(":", 1)[0] for line in done.stdout.splitlines()]
    assert flagged == ["sglang/srt/mem_cache/hiradix_cache.py:270", "sglang/srt/mem_cache/unified_radix_cache.py:436"]


def test_sglang_0_5_15_waits_and_only_its_drain_s_risks_remain() -> None:
    done = lint_release("0.5.15", "--select", "all", "--format", "json")
    assert done.returncode == 1, done.stderr
    findings = json.loads(done.stdout)["findings"]
    assert [(f["rule"], f["function"]) for f in findings] == [
        ("HC002", "HiRadixCache._drain_async_work"),
        ("HC002", "UnifiedRadixCache._drain_async_work"),
    ]
    assert hicache_lint("sglang==0.5.15").returncode == 0  # the default rules: clean


RELEASES_FLAGGED = ["0.5.13", "0.5.13.post1", "0.5.14"]
RELEASES_CLEAN = [
    "0.5.12",
    "0.5.15",
    "0.5.15.post1",
    "0.5.16",
    "0.5.17",
    "0.5.18",
    "0.5.19",
    "0.5.20",
    "0.5.21",
    "0.5.22",
    "0.5.23",
]


@pytest.mark.slow
@pytest.mark.parametrize("version", RELEASES_FLAGGED)
def test_the_leaking_releases_are_flagged_in_both_hicache_classes(version: str) -> None:
    """Read as whole programs (sglang/srt, 1,400-2,100 files each), as sglang-scan measured."""
    done = lint_release(version, "--format", "json")
    assert done.returncode == 1, done.stderr
    findings = json.loads(done.stdout)["findings"]
    assert sorted((f["rule"], f["function"]) for f in findings) == [
        ("HC001", "HiRadixCache._pp_sync"),
        ("HC001", "UnifiedRadixCache._pp_sync"),
    ]


@pytest.mark.slow
@pytest.mark.parametrize("version", RELEASES_CLEAN)
def test_the_other_releases_are_clean(version: str) -> None:
    done = lint_release(version)
    assert (done.returncode, done.stdout) == (0, ""), done.stderr
