"""hicache: reproduce, explain and gate the never-waited-Work host-memory leak.

The library API (docs/api.md), loaded on first use so that `import hicache_cli` stays cheap
(the tracer is imported into other programs through this package):

    import hicache_cli as hc
    report = hc.run(hc.StressConfig(pp=2, policy="reap", duration_s=8.0))
    report.verdict == hc.Verdict.LEAK        # True; report.ranks[0].work_list.max, ...
    hc.load_report("hicache-runs/.../report.json").to_dict()   # the JSON as written
    hc.trace(["torchrun", "--nproc-per-node", "2", "train.py"])  # any torch.distributed program
    hc.attach_to(12345, duration_s=60)       # a process already running: its census, then the tracer
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "run": "hicache_cli.api",
    "trace": "hicache_cli.api",
    "attach_to": "hicache_cli.api",
    "load_report": "hicache_cli.api",
    "with_sglang": "hicache_cli.api",
    "StressConfig": "hicache_cli.config",
    "RunConfig": "hicache_cli.config",
    "ModelTarget": "hicache_cli.targets",
    "SGLangTarget": "hicache_cli.targets",
    "TracedCommand": "hicache_cli.targets",
    "AttachedProcess": "hicache_cli.targets",
    "Report": "hicache_cli.analysis.results",
    "RankReport": "hicache_cli.analysis.results",
    "Failure": "hicache_cli.analysis.results",
    "Site": "hicache_cli.analysis.results",
    "Works": "hicache_cli.analysis.results",
    "Verdict": "hicache_cli.analysis.results",
    "Status": "hicache_cli.analysis.results",
    "Settler": "hicache_cli.analysis.settle",
    "Sample": "hicache_cli.sample",
    "HicacheError": "hicache_cli.errors",
    "UsageError": "hicache_cli.errors",
    "__version__": "hicache_cli.version",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'hicache_cli' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
