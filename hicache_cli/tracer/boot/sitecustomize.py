"""Put first on PYTHONPATH by `hicache trace`, so that Python runs it at start-up in every
process of the traced program; the program itself is not changed.

At start-up it only registers two import watchers (a dictionary lookup per import): one
for torch.distributed's core module, one for the module of `--loop`. Only when one fires
is hicache's tracer imported, so a process that never touches torch.distributed costs
nothing more. Then it runs the sitecustomize this file hides, if the program has one.
"""

import os
import sys

_C10D = "torch.distributed.distributed_c10d"


def _tracer():
    """hicache's tracer, imported from hicache's own tree; the tree is on sys.path only
    while importing, and last, so that the program's own packages always come first."""
    root = os.environ.get("HICACHE_TRACE_ROOT", "")
    sys.path.append(root)
    try:
        from hicache_cli.tracer import hooks
    finally:
        if root in sys.path:
            sys.path.remove(root)
    return hooks


class _AfterImport:
    """A meta-path finder that lets the normal finders find a watched module, then runs
    the tracer on it right after its code has run (before anyone can import from it)."""

    def __init__(self, names):
        self.names = set(names)

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.names:
            return None
        self.names.discard(fullname)
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run_module = loader.exec_module

        def exec_module(module):
            run_module(module)
            try:
                _tracer().imported(module)
            except Exception as exc:  # noqa: BLE001 - the program must run even if the tracer cannot
                sys.stderr.write(f"hicache trace: not tracing {fullname} in pid {os.getpid()}: {exc!r}\n")

        loader.exec_module = exec_module
        return spec

    def invalidate_caches(self):
        pass


def _arm():
    if not os.environ.get("HICACHE_TRACE_DIR"):
        return
    names = [_C10D]
    loop = os.environ.get("HICACHE_TRACE_LOOP", "")
    if ":" in loop:
        names.append(loop.split(":", 1)[0])
    sys.meta_path.insert(0, _AfterImport(names))


def _chain():
    """Run the sitecustomize that would have run without this one."""
    here = os.path.dirname(os.path.abspath(__file__))
    import importlib.machinery
    import importlib.util

    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_arm()
_chain()
