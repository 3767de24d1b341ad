"""The run configuration: built from options by a command, read back by every rank."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hicache_cli.errors import UsageError
from hicache_cli.protocol import CONFIG_FILE
from hicache_cli.records import Record, field_spec

DEFAULT_POLICY = "reap"  # the incident's: hicache's model leaks under it
DEFAULT_PROBE_HZ = 10.0
MAX_WORLD_SIZE = 64
DEVICES = ("auto", "cpu", "cuda")
PP_BACKENDS = ("gloo", "nccl")


@dataclass(frozen=True)
class StressConfig(Record):
    pp: int = field_spec(required=True, default=2)
    tp: int = field_spec(required=True, default=1)
    policy: str = field_spec(required=True, default=DEFAULT_POLICY)
    duration_s: float = field_spec(required=True, default=15.0)
    workload: str = field_spec(required=True, default="mixed")
    request_rate: float | None = None  # None: the workload preset's value
    prefix_sharing: float | None = None
    idle_fraction: float | None = None
    seed: int = field_spec(required=True, default=0)
    probe_hz: float = DEFAULT_PROBE_HZ
    wait_timeout_s: float = 5.0
    device: str = "auto"  # auto | cpu | cuda (auto: cuda when the rank sees a GPU)
    backend: str = "gloo"  # the default group's
    pp_backend: str = "gloo"  # the TP and PP-sync groups': gloo (as SGLang) or nccl (CUDA tensors)
    device_pool_tokens: int = 4096
    host_pool_tokens: int = 16384
    cache_warmup_rounds: int = 10000  # rounds run before the clock starts (Scheduler.warm_up)
    warmup_s: float | None = None  # None: per rank, where its RSS transient ends (assess.resolve_warmup)
    leak_threshold_mb_per_h: float = field_spec(required=True, default=100.0)
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
    def label(self) -> str:
        """The run's name where a policy's would go: the policy, sglang-0.5.14, trace."""
        return self.policy

    def title(self, sep: str = "  ", duration: bool = True) -> str:
        """The run in one line: `drain  pp=2 tp=1  15s` (the result table's title)."""
        parts = [self.label, f"pp={self.pp} tp={self.tp}"] + ([f"{self.duration_s:g}s"] if duration else [])
        return sep.join(parts)

    def properties(self) -> dict[str, Any]:
        """What names the run in a CI system's records (JUnit's properties)."""
        return {
            "policy": self.label,
            "pp": self.pp,
            "tp": self.tp,
            "duration_s": self.duration_s,
            "workload": self.workload,
            "seed": self.seed,
        }

    @property
    def traced(self) -> bool:
        return self.target == "trace"

    def validate(self) -> StressConfig:
        """Check every value; raise UsageError with the one line the CLI prints for the
        same mistake (named by its option). Returns the config, for chaining."""
        from cache.faults import FaultSpecError, parse_fault  # the cache model's registries: no torch
        from cache.policies import POLICIES
        from cache.workload import PRESETS
        from hicache_cli.units import MAX_RUN_S, MAX_TIMEOUT_S, format_limit

        if not self.traced:  # a traced program's ranks, policy and workload are its own
            for name, value in (("pp", self.pp), ("tp", self.tp)):
                if value < 1:
                    raise UsageError(f"--{name} must be at least 1, got {value}")
            if self.world_size > MAX_WORLD_SIZE:
                raise UsageError(f"--pp x --tp = {self.world_size} ranks; at most {MAX_WORLD_SIZE} are supported")
            if self.target == "model" and self.policy not in POLICIES:
                raise UsageError(f"--policy: unknown policy {self.policy!r}; choose one of: {', '.join(POLICIES)}")
            if self.workload not in PRESETS:
                raise UsageError(f"--workload: unknown workload {self.workload!r}; choose one of: {', '.join(PRESETS)}")
        for name, value in (
            ("request-rate", self.request_rate),
            ("prefix-sharing", self.prefix_sharing),
            ("idle-fraction", self.idle_fraction),
        ):
            if value is not None and not 0.0 <= value <= 1.0:
                raise UsageError(f"--{name} must be between 0 and 1, got {value}")
        if not 0.1 <= self.probe_hz <= 100:
            raise UsageError(f"--probe-hz must be between 0.1 and 100, got {self.probe_hz}")
        if not (math.isfinite(self.leak_threshold_mb_per_h) and self.leak_threshold_mb_per_h > 0):
            raise UsageError(f"--leak-threshold must be more than zero, got {self.leak_threshold_mb_per_h}")
        if self.device not in DEVICES:
            raise UsageError(f"--device: {self.device!r}; choose one of: {', '.join(DEVICES)}")
        if self.pp_backend not in PP_BACKENDS:
            raise UsageError(f"--pp-backend: {self.pp_backend!r}; choose one of: {', '.join(PP_BACKENDS)}")
        if self.pp_backend == "nccl" and self.device == "cpu":
            raise UsageError("--pp-backend nccl sends CUDA tensors: it needs --device cuda (or auto on a GPU machine)")
        for name, value, most in (
            ("duration", self.duration_s, MAX_RUN_S),
            ("wait-timeout", self.wait_timeout_s, MAX_TIMEOUT_S),
            ("stall-timeout", self.stall_timeout_s, MAX_TIMEOUT_S),
        ):
            if name == "duration" and self.traced and value == 0:
                continue  # a traced program runs until it exits
            if not (math.isfinite(value) and 0 < value <= most):
                raise UsageError(f"--{name}: must be more than zero and at most {format_limit(most)}, got {value:g}s")
        for spec in self.faults:
            try:
                parse_fault(spec, self.world_size)
            except FaultSpecError as exc:
                raise UsageError(f"--fault: {exc}") from None
        if self.warmup_s is not None and self.duration_s and self.warmup_s >= self.duration_s:
            raise UsageError(f"--warmup ({self.warmup_s:g}s) must be shorter than --duration ({self.duration_s:g}s)")
        return self

    def save(self, run_dir: Path) -> None:
        (run_dir / CONFIG_FILE).write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, run_dir: Path) -> StressConfig:
        return cls.from_dict(json.loads((run_dir / CONFIG_FILE).read_text(encoding="utf-8")))
