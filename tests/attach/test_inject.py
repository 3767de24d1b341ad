"""The injected text and what gdb's output means, without a debugger (unit tests)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hicache_cli.attach import inject
from hicache_cli.attach.procs import ProcessInfo
from hicache_cli.attach.protocol import BootArgs
from hicache_cli.errors import AttachRefused

TARGET = ProcessInfo(42, "python", 0, 1, "/usr/bin/python3.11", None, (3, 11), True, True, 4)


def boot_args(tmp_path: Path) -> BootArgs:
    return BootArgs(str(tmp_path), "/nowhere", "1:2")


def test_the_text_runs_the_script_with_its_arguments_and_binds_no_name(tmp_path: Path) -> None:
    script = tmp_path / "script.py"
    script.write_text(f"open({str(tmp_path / 'ran.json')!r}, 'w').write(__import__('json').dumps(ARGS))\n")
    namespace: dict[str, object] = {}
    exec(inject.injected_text(boot_args(tmp_path), 42, "hicache-abc", script), namespace)  # as __main__ would
    assert set(namespace) == {"__builtins__"}  # nothing left in the program's __main__
    ran = json.loads((tmp_path / "ran.json").read_text())
    assert ran == {**boot_args(tmp_path).to_dict(), "marker": "hicache-abc", "page": [0, 4096]}  # gdb fills the address


def test_the_text_never_raises(tmp_path: Path) -> None:
    script = tmp_path / "script.py"
    script.write_text("raise SystemExit(3)\n")  # a pending call that raised would hit the program's code
    exec(inject.injected_text(boot_args(tmp_path), 42, "hicache-abc", script), {})
    exec(inject.injected_text(boot_args(tmp_path), 42, "hicache-abc", tmp_path / "missing.py"), {})


def test_the_text_starts_with_its_marker_line(tmp_path: Path) -> None:
    """boot.py finds the page to unmap by it."""
    assert inject.injected_text(boot_args(tmp_path), 42, "hicache-abc").startswith("#hicache-abc\n")


GDB_OK = "HICACHE-STEP attached\nHICACHE-STEP symbols 1 2\nHICACHE-STEP page 4096\nHICACHE-STEP queued\n"


@pytest.mark.parametrize(
    ("output", "meaning"),
    [
        (GDB_OK, None),
        ("ptrace: No such process.\n", "it exited"),
        ("HICACHE-STEP attached\nNo symbol \"Py_AddPendingCall\" in current context.\n", inject.GDB_STEPS[1][1]),
        ("HICACHE-STEP attached\nHICACHE-STEP symbols 1 2\nHICACHE-STEP nothread\n", inject.NO_THREAD),
        ("HICACHE-STEP attached\nHICACHE-STEP symbols 1 2\n", "mmap failed in the process"),
        ("HICACHE-STEP attached\nHICACHE-STEP symbols 1 2\nHICACHE-STEP page 4096\n",
         "the interpreter refused the pending call (its queue is full)"),
        ("Python scripting is not supported in this copy of GDB.\n",
         "this gdb was built without Python, which hicache drives it with"),
        ("HICACHE-STEP attached\n\n(timed out)", "gdb did not finish in time"),
    ],
)  # fmt: skip
def test_what_gdb_said(output: str, meaning: str | None) -> None:
    assert inject.gdb_failure(output, TARGET) == meaning


def test_ptrace_refused_names_the_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inject, "ptrace_refusal", lambda _target: "kernel.yama.ptrace_scope is 2: ...")
    said = inject.gdb_failure("ptrace: Operation not permitted.\n", TARGET)
    assert said == "the kernel refused ptrace (EPERM): kernel.yama.ptrace_scope is 2: ..."


def test_no_debugger(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inject.shutil, "which", lambda _name: None)
    with pytest.raises(AttachRefused, match=r"^cannot attach to pid 42 \(python\): gdb is not installed"):
        inject.choose(TARGET)


def test_python_3_14_uses_remote_exec_without_a_debugger(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    exe = tmp_path / "python3.14"
    exe.touch()
    monkeypatch.setattr(inject.shutil, "which", lambda _name: None)
    newer = ProcessInfo(42, "python", 0, 1, str(exe), None, (3, 14), True, True, 4)
    assert inject.choose(newer) == "sys.remote_exec"


def test_gdb_fills_the_page_slot_without_changing_the_text_s_length(tmp_path: Path) -> None:
    """gdb_inject.py writes the page's address over the slot: same length, still Python, and
    boot.py gets the address in ARGS["page"]."""
    script = tmp_path / "script.py"
    script.write_text(f"open({str(tmp_path / 'ran.json')!r}, 'w').write(__import__('json').dumps(ARGS))\n")
    text = inject.injected_text(boot_args(tmp_path), 42, "hicache-abc", script)
    size = inject.page_size(text)
    filled = text.replace(inject.page_slot(0, size), inject.page_slot(0x7F0012345000, size))
    assert filled != text and len(filled) == len(text)
    exec(filled, {})
    assert json.loads((tmp_path / "ran.json").read_text())["page"] == [0x7F0012345000, 4096]
