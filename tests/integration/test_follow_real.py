"""`hicache attach --follow` on a real service: a launcher (programs/late_ranks.py) whose two
gloo ranks start after the sidecar is attached, one of them 25 s late to the group, freeze
their heaps once warm (gc.freeze(), as SGLang's /freeze_gc and vLLM do: the holder moves where
gc.get_objects() does not list it), and whose leak switches on mid-run (the relay's "fast
path", programs/late_leak.py: Works kept in a dict and only polled). The sidecar must attach
to the ranks when they come (rank 0 waiting in init_process_group, in C code, answers once
its group is made, later than an attach waits; rank 1, sleeping before it has one, answers
that it has none and is tried again: at ages 10 and 20 s without a group, at 40 s with one,
never on the edge of its making), raise the alerting rule's expression (deploy/prometheus)
with the holder and the line soon after the leak starts, detach on SIGTERM leaving nothing of
hicache in the ranks, and say the holder and the line in its report."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from hicache_cli.attach import procs
from tests.integration.attach_helpers import PROGRAMS, leftovers, start_hicache, wait_for

pytestmark = pytest.mark.slow

ALERTS = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "hicache-alerts.yml"
ALERT_WITHIN_S = 120.0  # the bound: the alert's expression true this soon after the leak starts


def alert_expression() -> tuple[str, float]:
    """HicacheWorksGrowing's expression, `METRIC == VALUE` (the form evaluated here)."""
    rules = [r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]
    expr = next(r["expr"] for r in rules if r["alert"] == "HicacheWorksGrowing")
    match = re.fullmatch(r"(hicache_[a-z_]+) == ([0-9.]+)", expr.strip())
    assert match, f"the test evaluates `METRIC == VALUE` only, the rule says {expr!r}"
    return match[1], float(match[2])


def firing(url: str, metric: str, value: float) -> list[dict[str, str]]:
    """The label sets for which the expression is true on one scrape."""
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    return [
        dict(sample.labels)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == metric and sample.value == value
    ]


def test_a_sidecar_follows_late_ranks_and_raises_the_alert_with_the_holder_and_the_line(tmp_path: Path) -> None:
    stop = tmp_path / "stop"
    launcher = subprocess.Popen(
        [sys.executable, str(PROGRAMS / "late_ranks.py"), "--ranks-after", "4", "--",
         "--stop-file", str(stop), "--leak-after", "15", "--peer-late", "25", "--freeze-gc-after", "8"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=(tmp_path / "launcher.err").open("w"), text=True,
    )  # fmt: skip
    lines: list[tuple[float, str]] = []

    def read() -> None:
        assert launcher.stdout is not None
        for line in launcher.stdout:
            lines.append((time.monotonic(), line))

    def said() -> str:
        return "".join(line for _, line in lines)

    threading.Thread(target=read, daemon=True).start()
    run_dir = tmp_path / "run"
    sidecar = None
    try:
        wait_for(lambda: any("launcher: up" in line for _, line in lines), 60, "the launcher")
        wait_for(lambda: procs.inspect(launcher.pid).torch, 30, "torch loaded in the launcher")
        follow = ["--follow", "--census-every", "4s", "--window", "3s", "--no-live", "--metrics-port", "0"]
        sidecar = start_hicache("attach", *follow, "--run-dir", str(run_dir), str(launcher.pid), cwd=tmp_path)
        wait_for(lambda: sidecar.first("metrics: http", "out") is not None or sidecar.proc.poll() is not None, 60,
                 "the metrics endpoint")  # fmt: skip
        assert sidecar.proc.poll() is None, sidecar.text("err") + sidecar.text("out")
        url = re.search(r"http://\S+", sidecar.text("out"))[0]  # type: ignore[index]

        # the ranks come after the sidecar attached (to the launcher, which has no process group)
        # (torchrun runs its ranks with `python -u`: print's text and its newline are two writes,
        # so one rank's line may run into the other's)
        wait_for(lambda: all(f"rank {r}: relaying" in said() for r in (0, 1)), 120, "the ranks")
        ranks = sorted(p for p in procs.descendants(launcher.pid) if procs.inspect(p).torch and _is_rank(p))
        assert len(ranks) == 2
        wait_for(lambda: sum(f"pid {pid} " in sidecar.text("out") and "attached" in sidecar.text("out")
                             for pid in ranks) == 2, 90, "both ranks attached")  # fmt: skip

        wait_for(lambda: said().count("heap frozen") == 2, 60, "both ranks froze their heaps")  # (the holder with it)
        wait_for(lambda: any("fast path on" in line for _, line in lines), 60, "the leak switched on")
        onset = next(t for t, line in lines if "fast path on" in line)
        metric, value = alert_expression()
        found: list[dict[str, str]] = []

        def alerted() -> bool:
            found[:] = [labels for labels in firing(url, metric, value) if labels.get("site")]
            return bool(found)

        try:
            wait_for(alerted, ALERT_WITHIN_S + 10, "the alert's expression with a line")
        except AssertionError as missed:  # what the sidecar said and served instead
            served = urllib.request.urlopen(url, timeout=5).read().decode().splitlines()
            holders = "\n".join(line for line in served if line.startswith("hicache_holder_"))
            raise AssertionError(f"{missed}\n{sidecar.text('out')[-4000:]}\n{holders}\n{said()[-2000:]}") from None
        raised_after = time.monotonic() - onset
        assert raised_after <= ALERT_WITHIN_S, raised_after
        (labels,) = found
        assert labels["holder"] == "Relay.inflight[<int>]" and labels["rank"] == "0"
        assert re.fullmatch(r".*late_leak\.py:\d+ in forward", labels["site"]), labels
        line_no = int(labels["site"].rsplit(":", 1)[1].split()[0])
        source = (PROGRAMS / "late_leak.py").read_text().splitlines()[line_no - 1]
        assert "dist.isend(" in source  # the line that makes the Works, not a wrapper's

        sidecar.proc.send_signal(signal.SIGTERM)
        assert sidecar.wait(60) == 128 + signal.SIGTERM
        out = sidecar.text("out")
        assert "made at" in out and "late_leak.py" in out, out
        report = json.loads((run_dir / "report.json").read_text())
        held = [h for p in report["target"]["processes"] for h in p["holders"] if h["path"] == labels["holder"]]
        assert held and any("late_leak.py" in site for site in held[0]["sites"]), held
        assert report["target"]["kind"] == "follow"

        looked = tmp_path / "leftovers"  # (the ranks write their stderr beside it, not in it)
        looked.mkdir()
        for pid in ranks:  # the ranks run on, with nothing of hicache left in them
            left = leftovers(pid, looked)
            assert left["modules"] == [] and left["threads"] == [] and left["hooks"] == [], left
            assert left["functions"] == [] and left["classes"] == [] and left["instances"] == [], left
            assert not left["wait_hooked"] and left["files"] == [] and left["os_exit_builtin"], left
            assert not left["excepthook"].startswith("hicache"), left
            assert left["frozen"] > 10_000, left  # (the heap the census found the holder in was frozen)
        assert launcher.poll() is None
    finally:
        if sidecar is not None and sidecar.proc.poll() is None:
            sidecar.proc.kill()
        stop.touch()
        try:
            launcher.wait(60)
        except subprocess.TimeoutExpired:
            for pid in procs.descendants(launcher.pid):
                subprocess.run(["kill", "-9", str(pid)], check=False)
            launcher.kill()
            launcher.wait(30)


def _is_rank(pid: int) -> bool:
    """A rank of the relay (not torchrun's agent, which has torch and the program's name too)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_text().split("\0")
    except OSError:
        return False
    return any(a.endswith("late_leak.py") for a in argv) and "torch.distributed.run" not in argv
