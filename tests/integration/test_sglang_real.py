"""`--target sglang`: SGLang's own PP-sync methods from release wheels, on real gloo ranks.

Needs the package index once: the 0.5.14 and 0.5.15 wheels (about 12 MB each) are fetched
without dependencies into hicache's cache (~/.cache/hicache, or $HICACHE_CACHE_DIR) and
reused from there.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hicache_cli.sglang_target.locate import CLASS_FILES, VERSION_FILE, cache_dir
from tests.integration.helpers import FORK, Run, TracedStress, hicache, stress_run

pytestmark = pytest.mark.slow

LEAKY, FIXED = "0.5.14", "0.5.15"  # the last release that reaps, the first that drains


@pytest.fixture(scope="session")
def leaky(sglang_leaky: TracedStress) -> Run:
    """The leaky release's stress run, made under `hicache trace` (conftest's sglang_leaky:
    trace_real reads the trace of the same run)."""
    return sglang_leaky.stress


@pytest.fixture(scope="session")
def fixed(tmp_path_factory: pytest.TempPathFactory) -> Run:
    tmp = tmp_path_factory.mktemp("sglang-fixed")
    return stress_run(tmp, "--target", f"sglang=={FIXED}", "--duration", "5s", *FORK)


def test_the_release_that_reaps_leaks_on_pp0(leaky: Run) -> None:
    assert leaky.proc.returncode == 0, leaky.proc.stderr
    report = leaky.report
    assert report["status"] == "completed"
    assert report["verdict"] == "LEAK"
    rank0 = report["ranks"][0]
    assert rank0["verdict"] == "LEAK"
    assert rank0["work_list"]["final"] > 1000  # SGLang's own list, never reaped on gloo
    assert rank0["work_list"]["growth_per_s"] > 100
    assert rank0["rss"]["slope_mb_per_h"] > 1000
    assert report["ranks"][1]["work_list"]["max"] == 0  # the last stage only receives


def test_the_report_names_the_code_that_ran(leaky: Run) -> None:
    target = leaky.report["target"]
    assert target["kind"] == "sglang"
    assert target["version"] == LEAKY
    assert target["origin"] == "wheel"
    assert target["class"] == "HiRadixCache"
    assert target["drain_method"] == "_reap_completed_async_work"
    assert len(target["sha256"]) == 64
    assert target["sends_per_round"] == pytest.approx(2.0, abs=0.01)  # writing_check and loading_check
    assert leaky.report["config"]["target"]["kind"] == "sglang"  # its settings: the run's target
    assert leaky.report["config"]["target"]["version"] == LEAKY
    assert f"SGLang {LEAKY} HiRadixCache" in leaky.proc.stdout


def test_the_release_that_drains_keeps_one_round_of_works(fixed: Run) -> None:
    assert fixed.proc.returncode == 0, fixed.proc.stderr
    report = fixed.report
    assert report["status"] == "completed"
    assert report["target"]["drain_method"] == "_drain_async_work"
    rank0 = report["ranks"][0]
    assert rank0["work_list"]["max"] <= 2
    # Over hundreds of rounds (paced at 2 ms: up to 2,500 in 5 s, 841 under CI's load), a
    # list that kept its two sends a round would have reached hundreds; this one held a round.
    assert rank0["rounds"] > 200
    assert report["verdict"] != "LEAK"


def test_a_patched_checkout_is_tested_as_it_stands(leaky: Run, tmp_path: Path) -> None:
    """A user's patch to the leaky release: reap waits instead of polling, and the leak goes."""
    release = cache_dir() / "sglang" / LEAKY  # fetched by the `leaky` run
    checkout = tmp_path / "checkout" / "python"
    for rel in (CLASS_FILES["HiRadixCache"], VERSION_FILE):
        (checkout / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(release / rel, checkout / rel)
    module = checkout / CLASS_FILES["HiRadixCache"]
    text = module.read_text(encoding="utf-8")
    polled = "self.work_list[count].is_completed()"
    assert text.count(polled) == 1
    module.write_text(text.replace(polled, "self.work_list[count].wait()"), encoding="utf-8")

    run = stress_run(tmp_path, "--target", f"sglang:{tmp_path / 'checkout'}", "--duration", "6s", *FORK)

    assert run.proc.returncode == 0, run.proc.stderr
    assert run.report["target"]["origin"] == "path"
    assert run.report["target"]["version"] == LEAKY  # from the copied sglang/_version.py
    assert run.report["ranks"][0]["work_list"]["max"] <= 2
    assert run.report["verdict"] != "LEAK"


def test_a_release_without_pp_sync_is_not_applicable(tmp_path: Path) -> None:
    proc = hicache("stress", "--no-live", "--target", "sglang==0.5.12", "--duration", "5s", cwd=tmp_path)
    assert proc.returncode == 4
    assert "not applicable" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "hicache-runs").exists()  # refused before a run directory was made
