"""The boot sitecustomize and what the tracer costs a process: real interpreters, started
with the environment `hicache trace` gives the program."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from hicache_cli.lifecycle import owner_token
from hicache_cli.tracer import protocol
from hicache_cli.tracer.session import claim_rank_file


def _run(code: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def _traced_env(tmp_path: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    return protocol.environment(base or dict(os.environ), tmp_path, 10.0, None, owner_token())


def test_the_environment_puts_the_boot_directory_first_and_arms_the_tracer(tmp_path: Path) -> None:
    env = protocol.environment({"PYTHONPATH": "/theirs"}, tmp_path, 5.0, "m:f", "1:2")
    assert env["PYTHONPATH"].split(os.pathsep) == [str(protocol.BOOT_DIR), "/theirs"]
    assert sorted(os.listdir(protocol.BOOT_DIR)) in (["sitecustomize.py"], ["__pycache__", "sitecustomize.py"])
    assert env[protocol.RUN_DIR_ENV] == str(tmp_path.resolve())
    assert (env[protocol.HZ_ENV], env[protocol.LOOP_ENV], env[protocol.OWNER_ENV]) == ("5.0", "m:f", "1:2")
    traced = protocol.TraceEnv.from_environ(env)
    assert traced is not None and (traced.hz, traced.loop, traced.owner) == (5.0, "m:f", "1:2")
    assert protocol.TraceEnv.from_environ({}) is None


def test_a_process_that_never_uses_torch_distributed_pays_nothing(tmp_path: Path) -> None:
    watched = ["torch", "hicache_cli", "numpy", "psutil"]
    code = f"import sys, json; print(json.dumps([m for m in {watched!r} if m in sys.modules]))"
    done = _run(code, _traced_env(tmp_path), tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
    assert list(tmp_path.iterdir()) == []  # no rank file either


def test_the_programs_own_sitecustomize_still_runs(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import os\nos.environ['THEIRS_RAN'] = 'yes'\n")
    env = _traced_env(tmp_path / "run", dict(os.environ, PYTHONPATH=str(theirs)))
    done = _run("import os, sitecustomize; print(os.environ.get('THEIRS_RAN'), sitecustomize.__file__)", env, tmp_path)
    assert done.returncode == 0, done.stderr
    ran, module = done.stdout.split()
    assert ran == "yes"
    assert module == str(theirs / "sitecustomize.py")


def test_the_tracer_arms_when_torch_distributed_is_imported(tmp_path: Path) -> None:
    code = (
        "import json\n"
        "from torch.distributed import init_process_group\n"  # imported by name: still the traced one
        "import torch.distributed as dist\n"
        "print(json.dumps([getattr(init_process_group, '__hicache_traced__', False),\n"
        "                  init_process_group is dist.distributed_c10d.init_process_group]))"
    )
    done = _run(code, _traced_env(tmp_path), tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == [True, True]
    assert not (tmp_path / "rank-0.jsonl").exists()  # imported, but no process group: not observed


def test_rank_files_are_claimed_once_each(tmp_path: Path) -> None:
    first = claim_rank_file(tmp_path, 1, 2)
    second = claim_rank_file(tmp_path, 1, 2)  # the same rank of a second process group
    third = claim_rank_file(tmp_path, 0, 2)
    assert [first[0], second[0], third[0]] == [1, 3, 0]
    for _, handle in (first, second, third):
        handle.close()
