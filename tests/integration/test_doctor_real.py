"""`hicache doctor` measures gloo's send-Work completion with two real processes."""

from __future__ import annotations

import json

import pytest

from hicache_cli.launch.doctor import Finding, as_json, measure_completion
from tests.integration.helpers import hicache

pytestmark = pytest.mark.slow


def test_doctor_json_reports_that_gloo_needs_wait(tmp_path) -> None:
    proc = hicache("doctor", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)
    # torch 2.13's gloo: a received send's Work stays incomplete until wait() (pytorch #30723)
    assert found["gloo_is_completed_advances_without_wait"] is False
    assert found["loopback_rendezvous"] is True
    assert found["torch_version"].startswith(("2.",))
    assert found["cuda_available"] in (True, False)
    assert set(found["meanings"]) >= {"gloo_is_completed_advances_without_wait", "torch_version"}


def test_doctor_plain_says_what_each_finding_means(tmp_path) -> None:
    proc = hicache("doctor", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("gloo_is_completed_advances_without_wait"))
    assert "False" in line and "reap" in line


def test_a_backend_that_cannot_run_is_an_error_not_a_crash() -> None:
    result = measure_completion("mpi", timeout_s=60)  # no MPI in a torch wheel
    assert "error" in result and "mpi" in result["error"]
    assert "RuntimeError" in result["error"] and "traceback :" not in result["error"]  # the rank's reason


def test_as_json_keeps_values_and_meanings() -> None:
    data = as_json([Finding("a", 1, "one"), Finding("b", None, "none")])
    assert data == {"a": 1, "b": None, "meanings": {"a": "one", "b": "none"}}
