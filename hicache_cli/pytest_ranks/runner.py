"""One rank of a marked test: `python -m hicache_cli.pytest_ranks.runner RUN_DIR RANK`.

It imports the test module as pytest did (pytest's sys.path, the module's name, its asserts
rewritten), starts the process group (FileStore rendezvous in the run directory) with the
Work tracer installed, calls the test body with rank and world_size, and writes how that
went. Then it waits for pytest's release and leaves with os._exit: a process-group teardown
can block on Works the body never waited, and those are what is measured.

Stack dumps are armed first thing (hicache_cli.stacks -> rank-N.stacks.txt), so a rank stuck anywhere,
the rendezvous included, can say where.
"""

from __future__ import annotations

import ast
import faulthandler
import importlib
import importlib.util
import os
import pickle
import sys
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

from hicache_cli import stacks
from hicache_cli.files import open_regular
from hicache_cli.lifecycle import owner_alive
from hicache_cli.protocol import ErrorKind, connection_lost
from hicache_cli.pytest_ranks.protocol import (
    ARGS,
    FAILED,
    PASSED,
    RELEASE,
    RENDEZVOUS,
    SKIPPED,
    Outcome,
    RankRequest,
    stack_file,
    started_file,
)
from hicache_cli.rundir import touch_run_file

PROCESS_GROUP_GRACE_S = 60.0  # torch's own timeout stays past pytest's, which reports hangs with a stack
RELEASE_GRACE_S = 120.0  # past the test's timeout, a rank stops waiting for pytest's release
RELEASE_POLL_S = 0.02
OWNER_EVERY_S = 0.5
RUNNER_FILE = os.path.normcase(os.path.abspath(__file__))


def main(argv: list[str]) -> NoReturn:
    run_dir, rank = Path(argv[1]), int(argv[2])
    stacks.arm(stack_file(run_dir, rank))  # every thread's stack, when pytest asks
    faulthandler.enable()  # a fatal error (segfault, abort) prints its stack to the rank's log
    request = RankRequest.read(run_dir)
    sys.path[:] = [*request.sys_path, *(p for p in sys.path if p not in request.sys_path)]
    sys.argv = [request.file]
    outcome = run(request, run_dir, rank)
    _finish(outcome, run_dir)
    _wait_for_release(run_dir, request)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run(request: RankRequest, run_dir: Path, rank: int) -> Outcome:
    """Everything that can fail in a rank, as an Outcome: importing the test, the process
    group, the body. pytest.skip() in the body is a skip, anything else raised a failure."""
    body_started = None
    try:
        function = load_test(request)
        kwargs = _arguments(run_dir, request, rank)
        start_process_group(request, run_dir, rank)
        touch_run_file(started_file(run_dir, rank))
        body_started = time.time()
        function(**kwargs)
    except BaseException as exc:  # noqa: BLE001 - every way a body can end is reported, KeyboardInterrupt too
        ended = time.time()
        status = SKIPPED if _is_skip(exc) else FAILED
        kind = ErrorKind.CONNECTION if connection_lost(exc) else ErrorKind.RAISED
        return Outcome(rank, os.getpid(), status, _last_line(exc), _format(exc), body_started, ended, error_kind=kind)
    ended = time.time()
    return Outcome(rank, os.getpid(), PASSED, body_started=body_started, body_ended=ended, unwaited_sends=_unwaited())


# -- importing the test as pytest did ------------------------------------------------------


def load_test(request: RankRequest) -> Callable[..., Any]:
    """The test function (bound to a fresh instance of its class, as pytest does)."""
    module = load_module(request.module, request.file, request.rewrite_asserts)
    *classes, name = request.qualname
    owner: Any = module
    for class_name in classes:
        owner = getattr(owner, class_name)
    if classes:
        owner = owner()
    return getattr(owner, name)


def load_module(name: str, file: str, rewrite_asserts: bool) -> ModuleType:
    """Import `file` under pytest's module `name`. Its asserts are rewritten with pytest's
    rewriter when pytest's were, so a failing assert says what it compared."""
    source = Path(file).read_bytes()
    tree = ast.parse(source, filename=file)
    if rewrite_asserts:
        try:
            from _pytest.assertion.rewrite import rewrite_asserts as rewrite
        except ImportError:  # another pytest layout: plain asserts
            pass
        else:
            rewrite(tree, source, file, None)
    code = compile(tree, file, "exec", dont_inherit=True)
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None:
        raise ImportError(f"cannot import the test module {name} from {file}")
    module = importlib.util.module_from_spec(spec)
    package = name.rpartition(".")[0]
    if package:  # relative imports in the test module need its package, where there is one
        try:
            importlib.import_module(package)
        except ImportError:
            pass
    sys.modules[name] = module
    exec(code, module.__dict__)  # noqa: S102 - the test module, as pytest runs it
    return module


def _arguments(run_dir: Path, request: RankRequest, rank: int) -> dict[str, Any]:
    """rank and world_size where the function takes them, and the fixture and parametrize
    values pytest resolved (unpickled after the module, whose classes they may be)."""
    given: dict[str, Any] = {}
    path = run_dir / ARGS
    if path.exists():
        with open_regular(path, follow=False) as fh:
            given = pickle.load(fh)
    own = {"rank": rank, "world_size": request.world_size}
    return {name: own[name] if name in own else given[name] for name in request.argnames}


# -- the process group and the tracer --------------------------------------------------


def start_process_group(request: RankRequest, run_dir: Path, rank: int) -> None:
    """init_process_group with the Work tracer armed first (so every Work the body gets is
    counted), then the tracer's session: rank-N.jsonl in the run directory."""
    import torch
    import torch.distributed as dist

    from hicache_cli.tracer import hooks
    from hicache_cli.tracer.protocol import TraceEnv

    if "nccl" in request.backend and torch.cuda.is_available():
        torch.cuda.set_device(rank % torch.cuda.device_count())
    c10d = sys.modules["torch.distributed.distributed_c10d"]
    hooks.STATE.env = TraceEnv(run_dir, request.probe_hz, None, request.owner)
    hooks.arm_works(c10d)
    dist.init_process_group(
        request.backend,
        init_method=(run_dir / RENDEZVOUS).resolve().as_uri(),
        rank=rank,
        world_size=request.world_size,
        timeout=timedelta(seconds=request.timeout_s + PROCESS_GROUP_GRACE_S),
    )
    hooks.start_session(c10d)


def _finish(outcome: Outcome, run_dir: Path) -> None:
    """The tracer's final line first (its sites' counts as the body left them), then the
    outcome: when pytest reads an outcome, the rank's samples are complete."""
    session = _session()
    if session is not None:
        if outcome.status == FAILED:
            session.probe.close("error", f"the test body raised {outcome.error}"[:300])
        else:
            session.probe.close("done", f"the test body {outcome.status}")
    outcome.write(run_dir)


def _unwaited() -> list[dict[str, Any]] | None:
    """The sends the body returned without waiting (its locals gone, a Work held there was
    dropped unwaited; one kept elsewhere is still live): analysis/shutdown.py."""
    hooks = sys.modules.get("hicache_cli.tracer.hooks")
    table = None if hooks is None else hooks.STATE.table
    if table is None:
        return None
    from hicache_cli.analysis.shutdown import unwaited_sends

    return unwaited_sends([site.to_json() for site in list(table.sites.values())]) or None


def _session() -> Any:
    hooks = sys.modules.get("hicache_cli.tracer.hooks")
    return None if hooks is None else hooks.STATE.session


def _wait_for_release(run_dir: Path, request: RankRequest) -> None:
    """Stay until pytest says every rank is done (a peer may still be receiving what this
    rank sent), pytest is gone, or pytest should long have said so."""
    release = run_dir / RELEASE
    check_owner_at = time.monotonic() + OWNER_EVERY_S
    give_up_at = time.monotonic() + request.timeout_s + RELEASE_GRACE_S
    while not release.exists() and time.monotonic() < give_up_at:
        time.sleep(RELEASE_POLL_S)
        if time.monotonic() >= check_owner_at:
            check_owner_at = time.monotonic() + OWNER_EVERY_S
            if not owner_alive(request.owner):
                return


# -- reporting ------------------------------------------------------------------------


def _is_skip(exc: BaseException) -> bool:
    skipped = sys.modules.get("_pytest.outcomes")
    return skipped is not None and isinstance(exc, skipped.Skipped)


def _last_line(exc: BaseException) -> str:
    """`AssertionError: assert 1 == 0`: the exception's type and its message's first line."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}"[:300] if lines else type(exc).__name__


def _format(exc: BaseException) -> str:
    """The traceback from the test's own frames on (the runner's are left out)."""
    tb = exc.__traceback__
    while tb is not None and os.path.normcase(tb.tb_frame.f_code.co_filename) == RUNNER_FILE:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


if __name__ == "__main__":
    main(sys.argv)
