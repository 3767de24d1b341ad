"""The run configuration: built from options by a command, read back by every rank."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

CONFIG_FILE = "config.json"


@dataclass(frozen=True)
class StressConfig:
    pp: int = 2
    tp: int = 1
    policy: str = "reap"
    duration_s: float = 15.0
    workload: str = "mixed"
    request_rate: float | None = None  # None: the workload preset's value
    prefix_sharing: float | None = None
    idle_fraction: float | None = None
    seed: int = 0
    probe_hz: float = 10.0
    wait_timeout_s: float = 5.0
    device: str = "auto"  # auto | cpu | cuda (auto: cuda when the rank sees a GPU)
    backend: str = "gloo"  # the default group's
    pp_backend: str = "gloo"  # the TP and PP-sync groups': gloo (as SGLang) or nccl (CUDA tensors)
    device_pool_tokens: int = 4096
    host_pool_tokens: int = 16384
    cache_warmup_rounds: int = 10000  # rounds run before the clock starts (Scheduler.warm_up)
    warmup_s: float | None = None  # None: per rank, where its RSS transient ends (assess.resolve_warmup)
    leak_threshold_mb_per_h: float = 100.0
    stop_grace_s: float = 1.5  # how long a rank blocked at the deadline gets to finish its round
    stall_timeout_s: float = 5.0  # a round older than this is a stall: stacks dumped, run ended
    faults: tuple[str, ...] = ()  # --fault specs, see cache/faults.py
    target: str = "model"  # model (hicache's cache model) | sglang (SGLang's own methods) | trace
    # target sglang: what to run, from hicache_cli.sglang_target.resolve (version, origin,
    # location, class, file, sha256, tags_file, drain_method)
    sglang: dict[str, str] | None = None
    # target trace (`hicache trace -- COMMAND`): {"command": [...], "loop": "MODULE:QUALNAME" or
    # None, "cwd": where it ran}; duration_s 0 means until the program exits
    trace: dict[str, Any] | None = None

    @property
    def world_size(self) -> int:
        return self.pp * self.tp

    @property
    def traced(self) -> bool:
        return self.target == "trace"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "faults": list(self.faults)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StressConfig:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        if "faults" in values:
            values["faults"] = tuple(values["faults"])
        return cls(**values)

    def save(self, run_dir: Path) -> None:
        (run_dir / CONFIG_FILE).write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, run_dir: Path) -> StressConfig:
        return cls.from_dict(json.loads((run_dir / CONFIG_FILE).read_text(encoding="utf-8")))
