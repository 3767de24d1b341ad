"""Injected into a process after `hicache attach` detached (tests only, through inject.py):
what of hicache is still in it, written as JSON to the run directory. Stdlib only, and it
imports nothing of hicache itself."""

import gc
import json
import os
import sys
import threading
import types
import weakref


def look():
    root = os.path.join(ARGS["root"], "hicache_cli")  # noqa: F821 - given by the injected text
    frozen = gc.get_freeze_count()
    # What the program froze while hicache was attached (gc.freeze()) froze hicache's objects
    # with it: those the collector could free, were they not frozen, are garbage, not left
    # behind; what is still reachable after a full pass is.
    gc.unfreeze()
    gc.collect()
    found = {"modules": sorted(m for m in sys.modules if m == "hicache_cli" or m.startswith("hicache_cli."))}
    functions, classes, instances = [], [], []
    for obj in gc.get_objects():
        if isinstance(obj, types.FunctionType) and obj.__code__.co_filename.startswith(root):
            functions.append(obj.__qualname__)
        elif isinstance(obj, type) and str(getattr(obj, "__module__", "")).startswith("hicache_cli"):
            classes.append(obj.__qualname__)
        elif str(getattr(type(obj), "__module__", "")).startswith("hicache_cli"):
            instances.append(type(obj).__qualname__)
    found.update(functions=sorted(set(functions)), classes=sorted(set(classes)), instances=sorted(set(instances)))
    found["threads"] = sorted(t.name for t in threading.enumerate() if t.name.startswith("hicache"))
    c10d = sys.modules["torch.distributed.distributed_c10d"]
    group = c10d.ProcessGroup.__dict__
    found["hooks"] = sorted(
        n
        for n in ("send", "recv", "allreduce", "__hicache_originals__")
        if isinstance(group.get(n), types.FunctionType) or n in group and n.startswith("__")
    )
    found["wait_hooked"] = isinstance(c10d.Work.__dict__.get("wait"), types.FunctionType)
    found["excepthook"] = getattr(sys.excepthook, "__module__", "") or ""
    found["os_exit_builtin"] = isinstance(os._exit, types.BuiltinFunctionType)
    found["sys_path"] = [p for p in sys.path if p == ARGS["root"]]  # noqa: F821
    found["importer_cache"] = [p for p in sys.path_importer_cache if p == ARGS["root"] or p.startswith(root)]  # noqa: F821
    works = [
        w for w in gc.get_referents(*[o for o in gc.get_objects() if isinstance(o, list)]) if isinstance(w, c10d.Work)
    ]
    # files still open: the probe's kept /proc files, a rank file in the run directory
    kept = (f"/proc/{os.getpid()}/statm", f"/proc/{os.getpid()}/smaps_rollup")
    targets = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            targets.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # (the directory's own descriptor, closed by now)
            continue
    found["files"] = sorted(t for t in targets if t in kept or t.startswith(ARGS["run_dir"]))  # noqa: F821
    found["works_seen"] = len(works)
    found["frozen"] = frozen
    found["works_with_weakrefs"] = sum(1 for w in works if weakref.getweakrefs(w))
    return found


_path = os.path.join(ARGS["run_dir"], f"leftovers-{os.getpid()}.json")  # noqa: F821
_found = look()  # (before this script opens its own file)
with open(_path + ".tmp", "w") as out:
    json.dump(_found, out)
os.replace(_path + ".tmp", _path)
