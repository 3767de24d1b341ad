"""What a user reads first, on programs written the way users write them (programs/): the
line (through a decorator's wrapper), the holder (however often the program rebinds it), the
why (a polling reaper, and where it polls), and how an attached program ended (attaching
never changes it). Real torchrun (the attached programs), ranks forked by a launcher users
write (programs/fork_launch.py: the traced ones), real gloo ranks, the real CLI; each leaky
shape has a draining twin that stays clean."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.integration.attach_helpers import FORK_LAUNCH, PROGRAMS, TORCHRUN, hicache_run, start_hicache, start_program
from tests.integration.test_trace_real import trace

pytestmark = pytest.mark.slow
STAYS_FALSE = "which stays False on gloo until wait()"


def program(name: str) -> str:
    return str(PROGRAMS / name)


def line_of(name: str, text: str) -> int:
    """The line of programs/NAME that holds `text` (once)."""
    lines = [n for n, line in enumerate(Path(program(name)).read_text().splitlines(), 1) if text in line]
    assert len(lines) == 1, (name, text, lines)
    return lines[0]


def sites_by_op(report: dict[str, Any], rank: int) -> dict[str, dict[str, Any]]:
    ranked = next(r for r in report["ranks"] if r["rank"] == rank)
    return {s["op"]: s for s in ranked["works"]["sites"]}


# -- the line: decorators' wrappers ------------------------------------------------------------


@pytest.fixture(scope="module")
def gathered(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    """stats_gather.py traced: its handles kept, and its twin that waits them. 15 s: the
    duration counts the program's start-up, which under torchrun took most of 8 s beside the
    rest of the suite."""
    out = []
    for twin in ((), ("--wait",)):
        tmp = tmp_path_factory.mktemp("gather")
        traced = trace(tmp, *FORK_LAUNCH, "--nproc-per-node", "2", program("stats_gather.py"), "--stop-file",
                       str(tmp / "stop"), *twin, options=("--duration", "15s"))  # fmt: skip
        out.append(traced.report)
    return out[0], out[1]


def test_a_collective_torch_wraps_in_deprecated_is_the_programs_line(gathered: tuple) -> None:
    """torch 2.13: all_gather_into_tensor and reduce_scatter_tensor pass through
    typing_extensions' @deprecated wrapper; the isend through the team's logging decorator."""
    kept, _ = gathered
    for rank in (0, 1):
        sites = sites_by_op(kept, rank)
        where = {op: (Path(s["file"]).name, s["line"], s["function"]) for op, s in sites.items()}
        assert where == {
            "all_gather_into_tensor": (
                "stats_gather.py",
                line_of("stats_gather.py", "append(dist.all_gather_into_tensor("),
                "step",
            ),
            "reduce_scatter_tensor": (
                "stats_gather.py",
                line_of("stats_gather.py", "append(dist.reduce_scatter_tensor("),
                "step",
            ),
            "isend": ("stats_gather.py", line_of("stats_gather.py", "comm_helpers.isend("), "step"),
        }
        assert all(s["live"] > 50 and s["waited"] == 0 for s in sites.values())


def test_the_twin_that_waits_its_handles_stays_clean(gathered: tuple) -> None:
    _, waited = gathered
    for rank in (0, 1):
        ranked = next(r for r in waited["ranks"] if r["rank"] == rank)
        assert ranked["verdict"] != "LEAK", ranked["verdict_reason"]
        sites = sites_by_op(waited, rank)
        assert set(sites) == {"all_gather_into_tensor", "reduce_scatter_tensor", "isend"}
        assert all(Path(s["file"]).name == "stats_gather.py" and s["live"] <= 1 for s in sites.values())


# -- the holder and the why: a reaper that rebuilds its list -----------------------------------


@dataclass
class Attached:
    command: Any
    report: dict[str, Any]
    lines: list[str]
    exit_code: int


def attach_to(tmp: Path, name: str, args: list[str], label: str) -> Attached:
    server = start_program(tmp, name, args, label, timeout=300, launcher=FORK_LAUNCH)
    try:
        time.sleep(2.0)  # it has been running (and rebinding its list) before anyone looks
        run_dir = tmp / f"attach-{label}"
        command = hicache_run("attach", "--duration", "4s", "--no-live", "--run-dir", str(run_dir),
                              str(server.pid), cwd=tmp)  # fmt: skip
        report = json.loads((run_dir / "report.json").read_text())
        return Attached(command, report, server.lines, server.stop())
    finally:
        server.kill()


def rank0(attached: Attached) -> tuple[dict[str, Any], dict[str, Any]]:
    process = next(p for p in attached.report["target"]["processes"] if p["rank"] == 0)
    ranked = next(r for r in attached.report["ranks"] if r["rank"] == 0)
    return process, ranked


@pytest.fixture(scope="module")
def shipper(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Attached]:
    """The shipper that keeps its sends does so on a big application's heap (3 million
    objects on stage 0: the census walks them all), a step every 10 ms (its reaper polls the
    whole list each step: at 2 ms its stage 0 took 18 CPU-s of the run); its twin drains.
    reap_loop.py the same."""
    tmp = tmp_path_factory.mktemp("shipper")
    return {
        "kept": attach_to(tmp, "rebuilt_reaper.py", ["--ballast", "3000000", "--interval", "0.01"], "kept"),
        "drained": attach_to(tmp, "rebuilt_reaper.py", ["--drain"], "drained"),
        "module": attach_to(tmp, "reap_loop.py", [], "module"),
        "module drained": attach_to(tmp, "reap_loop.py", ["--wait"], "module-drained"),
    }


@pytest.mark.parametrize(("case", "path"), [("kept", "Shipper.pending"), ("module", "__main__.work_list")])
def test_the_census_names_a_list_the_program_rebinds_every_step(shipper: dict[str, Attached], case: str,
                                                                path: str) -> None:  # fmt: skip
    attached = shipper[case]
    assert attached.command.proc.returncode == 0, attached.command.text("err")
    process, ranked = rank0(attached)
    top = process["holders"][0]
    assert (top["path"], top["container"], top["named"], top["completed"]) == (path, "list", True, 0)
    assert top["works"] > 100 and top["works_end"] > top["works"]
    assert ranked["verdict"] == "LEAK" and f"`{path}` holds" in ranked["verdict_reason"]
    if case == "kept":
        assert process["cost"]["objects"] > 3_000_000


def test_attach_says_where_the_program_polls_and_why_that_frees_nothing(shipper: dict[str, Attached]) -> None:
    """The rebuilt list polls every Work, the new ones too: the site says it, with why."""
    where = f"rebuilt_reaper.py:{line_of('rebuilt_reaper.py', '        self.pending = [w for w')} in ship"
    _, ranked = rank0(shipper["kept"])
    assert f"never waited: polled with is_completed() at {where}, {STAYS_FALSE}" in ranked["verdict_reason"]
    said = shipper["kept"].command.text("err") + shipper["kept"].command.text("out")
    assert f"polled with is_completed() at {where}, {STAYS_FALSE}" in said


def test_a_prefix_reaper_polling_only_works_from_before_the_attach_is_named_on_its_holder(
    shipper: dict[str, Attached],
) -> None:
    """reap_loop.py polls only its oldest Work, made before hicache came: no site's Work is
    ever polled, so the polls are told on the holder the census found, with what they said."""
    process, ranked = rank0(shipper["module"])
    polled = process["polled_before"]
    line = line_of("reap_loop.py", ".is_completed():")
    assert (Path(polled["file"]).name, polled["line"], polled["function"]) == ("reap_loop.py", line, "<module>")
    assert polled["polls"] > 100 and polled["true"] == 0
    where = f"reap_loop.py:{line} in <module>: {polled['polls']:,} polls, none True"
    assert "`__main__.work_list` holds" in ranked["verdict_reason"]
    assert f"polled with is_completed() at {where}" in ranked["verdict_reason"]


@pytest.mark.parametrize("case", ["drained", "module drained"])
def test_the_twins_that_wait_stay_clean(shipper: dict[str, Attached], case: str) -> None:
    process, ranked = rank0(shipper[case])
    assert ranked["verdict"] != "LEAK", ranked["verdict_reason"]
    assert all(h["works"] <= 2 and (h["works_end"] or 0) <= 2 for h in process["holders"])
    assert STAYS_FALSE not in ranked["verdict_reason"]


def test_the_programs_ran_on_and_ended_as_they_would_have(shipper: dict[str, Attached]) -> None:
    for case, attached in shipper.items():
        assert attached.exit_code == 0, case
        assert sum("stopped after" in line for line in attached.lines) == 2, (case, attached.lines)


def test_trace_says_the_polling_line_too(tmp_path: Path) -> None:
    # the duration counts the program's start-up: under torchrun, beside the whole suite on a slow
    # machine of this kind (torch's import 1.5 CPU-s), the ranks had not made their group 6 s in
    traced = trace(tmp_path, *FORK_LAUNCH, "--nproc-per-node", "2", program("rebuilt_reaper.py"), "--stop-file",
                   str(tmp_path / "stop"), options=("--duration", "12s"))  # fmt: skip
    where = f"rebuilt_reaper.py:{line_of('rebuilt_reaper.py', '        self.pending = [w for w')} in ship"
    site = sites_by_op(traced.report, 0)["isend"]
    assert (site["backend"], site["completed"], site["waited"]) == ("gloo", 0, 0)
    polled = site["polled"]
    assert f"{Path(polled['file']).name}:{polled['line']} in {polled['function']}" == where
    assert f"polled with is_completed() at {where}, {STAYS_FALSE}" in traced.proc.stderr + traced.proc.stdout


# -- attaching never changes how a program ends -------------------------------------------------


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """pp_trainer.py (torch's Schedule1F1B, 2 stages) run alone, then run again and attached
    to (by torchrun's pid) until it ends by itself. Both tear their process group down: one
    left up aborts rank 0 as the interpreter finalizes in about 1 run in 4 with no hicache
    (torch's exit race, docs/attach.md), so only a trainer that ends cleanly alone can show
    that attaching does not change how it ends."""
    tmp = tmp_path_factory.mktemp("trainer")
    # 20 ms a step, as a GPU's compute: flat out its two ranks took two cores for 15 s
    command = [*TORCHRUN, "--nproc-per-node", "2", program("pp_trainer.py"), "--destroy", "--interval", "0.02"]
    # alone, it only has to end as training scripts do: 3 s of training is as good as 12
    alone = subprocess.run([*command, "--seconds", "3"], cwd=tmp, capture_output=True, text=True, timeout=300)
    command += ["--seconds", "12"]  # attached: it must outlive the attach (seconds under load)
    errors = (tmp / "trainer.stderr").open("w+")
    trainer = subprocess.Popen(command, cwd=tmp, stdout=subprocess.PIPE, stderr=errors, text=True)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(iter(trainer.stdout.readline, "")), daemon=True).start()
    deadline = time.monotonic() + 120
    while sum("training" in line for line in lines) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)
    attach = hicache_run("attach", "--duration", "120s", "--no-live", "--run-dir", str(tmp / "attach"),
                         str(trainer.pid), cwd=tmp)  # fmt: skip
    trainer.wait(300)
    time.sleep(0.5)  # the last lines read
    errors.seek(0)
    out, err = "".join(lines), errors.read()
    report = json.loads((tmp / "attach" / "report.json").read_text())
    return {"alone": alone, "attached": (trainer.returncode, out, err), "attach": attach, "report": report}


def test_a_trainer_that_ends_while_attached_ends_as_it_does_alone(trained: dict[str, Any]) -> None:
    alone = trained["alone"]
    code, out, err = trained["attached"]
    assert alone.returncode == 0 and code == alone.returncode, err[-3000:]
    assert "terminate called" not in err and "Signal" not in err
    assert sorted(line.split(":")[0] for line in out.splitlines() if "trained" in line) == ["rank 0", "rank 1"]


def test_each_attached_rank_detached_before_its_interpreter_finalized(trained: dict[str, Any]) -> None:
    """Its agent finished (status written, hooks put back) on the way out, not cut off."""
    ranks = [p for p in trained["report"]["target"]["processes"] if p["rank"] is not None]
    assert [(p["state"], p["detach_reason"], p["leftovers"]) for p in ranks] == [
        ("detached", "the process exited", [])
    ] * 2


def test_the_report_says_how_each_attached_process_ended(trained: dict[str, Any]) -> None:
    attach = trained["attach"]
    assert attach.proc.returncode == 0, attach.text("err")
    ranks = [p for p in trained["report"]["target"]["processes"] if p["rank"] is not None]
    for process in ranks:
        ended = process["ended"]
        if ended["told_by"] == "kernel":
            assert (ended["how"], ended["exit_code"], ended["signal"]) == ("exited", 0, None)
        else:  # the kernel's events are not open here: the process's own last line
            assert (ended["how"], ended["told_by"]) == ("exited", "process")
            assert "its exit code is its parent's to read" in ended["note"]
    said = attach.text("err") + attach.text("out")
    assert "every process ended by itself: " in said
    assert said.count("    ended: exited") >= 2


def test_a_process_that_aborts_as_its_interpreter_finalizes_is_told_where_it_died(tmp_path: Path) -> None:
    """Killed by SIGABRT after its exit hooks had run, its process group left up (torch's exit
    race, certain here by a stand-in: programs/lone_rank.py --abort-at-exit): the report says
    it died after its last line, as its interpreter finalized, and what aborts a program so."""
    if os.geteuid() != 0:
        pytest.skip("the kernel's process events, the only word on a signal, are open to root")
    stop = tmp_path / "stop"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    argv = [
        sys.executable,
        str(PROGRAMS / "lone_rank.py"),
        "--stop-file",
        str(stop),
        "--abort-at-exit",
        "--leave-group-up",
    ]
    program = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert "serving" in program.stdout.readline()
        run_dir = tmp_path / "attach"
        command = start_hicache("attach", "--duration", "120s", "--no-live", "--run-dir", str(run_dir),
                                str(program.pid), cwd=tmp_path)  # fmt: skip
        command.wait_for_census()
        stop.touch()
        assert program.wait(60) == -signal.SIGABRT
        assert command.wait(120) == 0, command.text("err")
    finally:
        program.kill()
    ended = json.loads((run_dir / "report.json").read_text())["target"]["processes"][0]["ended"]
    assert (ended["how"], ended["signal"], ended["told_by"]) == ("killed", "SIGABRT", "kernel")
    assert ended["note"].startswith("after its exit hooks had run (its last line: the process exited)")
    assert "pytorch/pytorch#190489" in ended["note"]
    assert "ended: killed by SIGABRT (the kernel's process events; after its exit hooks" in command.text("out")
