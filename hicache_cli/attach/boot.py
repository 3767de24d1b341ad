"""The first code hicache runs inside an attached process: it decides, starts a thread, returns.

Run by the injected text (inject.py: `exec` of this file with ARGS, in a fresh namespace, at
a point where the interpreter runs Python anyway: a pending call, or `sys.remote_exec`). It
runs on the program's main thread, so it does as little as it can:

1. refuse, in the status file, a process that does not use torch.distributed (torch not
   imported; no process group initialised), or one hicache could not be asked into (a stop
   file: hicache gave up waiting; hicache is gone) - importing nothing of hicache;
2. import the agent from hicache's tree (put first on sys.path for that import only, so that
   this hicache's code runs even where the program's environment has another), and start
   its thread (agent.py), which does everything else.

Never raises: an exception here would surface in the program's own code.
"""

import json
import os
import sys
import tempfile
import threading
import time

ARGS: dict = globals().get("ARGS", {})  # the injected text passes them in this file's namespace
PACKAGE = "hicache_cli"
THREAD_NAME = "hicache-attach"  # protocol.THREAD_NAME: an agent refuses a process that has one
AGENT_DIR = "agent"  # protocol.AGENT_DIR: where the agent writes; spelled here, which imports nothing of hicache


def _status(state: str, reason: str) -> None:
    """The status file, in the agents' directory (hicache made it for this process's user),
    written under a fresh name made exclusively (never through a link), then renamed."""
    directory = os.path.join(ARGS["run_dir"], AGENT_DIR)
    data = {"pid": os.getpid(), "state": state, "reason": reason, "python": sys.version.split()[0]}
    fd, tmp = tempfile.mkstemp(prefix=".attach-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(data, out)
        os.replace(tmp, os.path.join(directory, f"attach-{os.getpid()}.json"))
    except BaseException:
        os.unlink(tmp)
        raise


def _release_page() -> None:
    """Unmap the page gdb wrote the injected text into: compiled by now, never read again.
    gdb wrote its address into the text (ARGS["page"]); nothing here reads memory it does
    not own (another thread may unmap any other mapping at any moment)."""
    address, size = ARGS.get("page", (0, 0))
    if not address or not size:
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    libc.munmap(ctypes.c_void_p(address), size)


def _why_not() -> str | None:
    stopped = (os.path.join(ARGS["run_dir"], name) for name in ("attach-stop", f"attach-{os.getpid()}.cancel"))
    if any(os.path.exists(path) for path in stopped):
        return "hicache stopped waiting for this process before it could run Python"
    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    if "torch" not in sys.modules:
        return "torch is not imported"
    if c10d is None or not c10d.is_initialized():
        return "torch.distributed has no process group initialised"
    return None


def _import_agent() -> tuple:
    """The agent module, and the hicache modules this import added (removed on detach)."""
    root = ARGS["root"]
    mine = os.path.join(root, PACKAGE, "__init__.py")
    already = sys.modules.get(PACKAGE)
    if already is not None and os.path.realpath(getattr(already, "__file__", "") or "") != os.path.realpath(mine):
        raise ImportError(f"the program imports another {PACKAGE} ({getattr(already, '__file__', '?')})")
    before = set(sys.modules)
    sys.path.insert(0, root)
    try:
        from hicache_cli.attach import agent
    except BaseException:
        _forget(before)
        raise
    finally:
        if sys.path and sys.path[0] == root:
            del sys.path[0]
        elif root in sys.path:
            sys.path.remove(root)
    return agent, _ours(before)


def _ours(before: set) -> list:
    return sorted(m for m in sys.modules if m not in before and (m == PACKAGE or m.startswith(PACKAGE + ".")))


def _forget(before: set) -> None:
    for name in _ours(before):
        del sys.modules[name]


def main() -> None:
    _release_page()
    why = _why_not()
    if why is not None:
        _status("refused", why)
        return
    agent, added = _import_agent()
    thread = threading.Thread(target=agent.run, args=(dict(ARGS), added, time.time()), name=THREAD_NAME)
    thread.daemon = True  # never keeps the program from exiting
    thread.start()


try:
    main()
except BaseException as exc:  # noqa: BLE001 - whatever happens stays out of the program
    try:
        _status("refused", f"{type(exc).__name__}: {exc}")
    except BaseException:  # noqa: BLE001 - nowhere left to say it
        pass
