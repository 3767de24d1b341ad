"""The run configuration: what runs (a typed target, targets.py) and the measurement
settings every target shares. Built from options by a command (or by the API), written to
the run directory's config.json, read back by every rank and every reader."""

from __future__ import annotations

import json
import math
import types
import typing
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from hicache_cli.errors import UsageError
from hicache_cli.files import read_bytes, run_file
from hicache_cli.protocol import CONFIG_FILE
from hicache_cli.records import Record, ShapeError, field_spec
from hicache_cli.targets import (
    DEFAULT_POLICY,
    DEVICES,
    MAX_WORLD_SIZE,
    PP_BACKENDS,
    ModelTarget,
    RankedTarget,
    Target,
)

__all__ = [
    "DEFAULT_POLICY",
    "DEFAULT_PROBE_HZ",
    "DEVICES",
    "LAUNCHERS",
    "MAX_WORLD_SIZE",
    "PP_BACKENDS",
    "RunConfig",
    "StressConfig",
]

DEFAULT_PROBE_HZ = 10.0
# How hicache's own ranks are started (launch/launcher.py): by torchrun, as a deployment starts
# them, or forked from one process that imported torch once (rank/forked.py; one machine only).
LAUNCHERS = ("torchrun", "fork")
CONFIG_LIMIT = 16 << 20  # config.json is a few kB; a larger one is not a config
# A field's command-line option, where its name does not say it (the rest: --name-with-dashes).
OPTIONS = {
    "duration_s": "duration",
    "warmup_s": "warmup",
    "wait_timeout_s": "wait-timeout",
    "stall_timeout_s": "stall-timeout",
    "leak_threshold_mb_per_h": "leak-threshold",
    "faults": "fault",
    "pids": "pid",
}


@dataclass(frozen=True)
class RunConfig(Record):
    """What runs, and how it is measured (the same for every kind of target)."""

    target: Target = field_spec(required=True, default=ModelTarget())
    duration_s: float | None = 15.0  # None: until the target ends by itself (a traced program)
    probe_hz: float = DEFAULT_PROBE_HZ  # samples per second per rank
    warmup_s: float | None = None  # None: per rank, where its RSS transient ends (assess.resolve_warmup)
    leak_threshold_mb_per_h: float = 100.0
    stall_timeout_s: float = 5.0  # a round older than this is a stall: stacks dumped, run ended
    launcher: str = LAUNCHERS[0]  # how hicache's own ranks start (LAUNCHERS); a program or a process starts itself

    @property
    def label(self) -> str:
        """The run's name where a policy's would go: the policy, sglang-0.5.14, trace."""
        return self.target.label

    def title(self, sep: str = "  ", duration: bool = True) -> str:
        """The run in one line: `drain  pp=2 tp=1  15s`, `trace: python train.py`."""
        return self.target.title(self.duration_s if duration else None, sep)

    def properties(self) -> dict[str, Any]:
        """What names the run in a CI system's records (JUnit's properties)."""
        ranked = self.ranked
        shape = {"pp": ranked.pp, "tp": ranked.tp} if ranked else {}
        workload = {"workload": ranked.workload, "seed": ranked.seed} if ranked else {}
        return {"policy": self.label, **shape, "duration_s": self.duration_s, **workload}

    @property
    def ranked(self) -> RankedTarget | None:
        """The target when hicache runs it on ranks of its own (the model or SGLang's code)."""
        return self.target if isinstance(self.target, RankedTarget) else None

    @property
    def expected_ranks(self) -> int | None:
        return self.target.expected_ranks

    def validate(self) -> RunConfig:
        """Check every value (its type first, then its range); raise UsageError with the one
        line the CLI prints for the same mistake (named by its option). Returns the config."""
        from hicache_cli.units import MAX_RUN_S, MAX_TIMEOUT_S, format_limit

        check_types(self.target)
        check_types(self)
        self.target.validate()
        if self.launcher not in LAUNCHERS:
            raise UsageError(f"--launcher: unknown {self.launcher!r}; choose from: {', '.join(LAUNCHERS)}")
        if self.launcher != LAUNCHERS[0] and self.ranked is None:
            raise UsageError(
                f"--launcher {self.launcher} starts hicache's own ranks; a traced or attached program starts itself"
            )
        if not 0.1 <= self.probe_hz <= 100:
            raise UsageError(f"--probe-hz must be between 0.1 and 100, got {self.probe_hz}")
        if not (math.isfinite(self.leak_threshold_mb_per_h) and self.leak_threshold_mb_per_h > 0):
            raise UsageError(f"--leak-threshold must be more than zero, got {self.leak_threshold_mb_per_h}")
        for name, value, most in (
            ("duration", self.duration_s, MAX_RUN_S),
            ("stall-timeout", self.stall_timeout_s, MAX_TIMEOUT_S),
        ):
            if value is None and self.ranked is None:
                continue  # a traced program runs until it exits; an attach until stopped (or they exit)
            if value is None or not (math.isfinite(value) and 0 < value <= most):
                got = "none" if value is None else f"{value:g}s"
                raise UsageError(f"--{name}: must be more than zero and at most {format_limit(most)}, got {got}")
        if self.warmup_s is not None and self.duration_s and self.warmup_s >= self.duration_s:
            raise UsageError(f"--warmup ({self.warmup_s:g}s) must be shorter than --duration ({self.duration_s:g}s)")
        return self

    @classmethod
    def from_dict(cls, data: Any, where: str = "") -> RunConfig:
        if isinstance(data, dict) and not isinstance(data.get("target"), dict):
            data = legacy_config(data, where)  # written by hicache before targets were typed
        return super().from_dict(data, where)

    def save(self, run_dir: Path) -> None:
        """config.json, created exclusively in the run directory (never through a symlink)."""
        path = run_dir / CONFIG_FILE
        try:
            with run_file(path, "new") as fh:
                fh.write(json.dumps(self.to_dict(), indent=2) + "\n")
        except OSError as exc:
            raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None

    @classmethod
    def load(cls, run_dir: Path) -> RunConfig:
        """config.json read back; anything that is not one is a UsageError in one line."""
        path = run_dir / CONFIG_FILE
        try:
            data = json.loads(read_bytes(path, follow=False, limit=CONFIG_LIMIT))
            if not isinstance(data, dict):
                raise ValueError(f"a JSON {type(data).__name__}, not an object")
            # every run's config passed validate() before it was written: one that does not
            # now (tp 0, pp 10**30) was written by someone else, and would divide by zero or
            # fill the memory wherever a reader trusts it
            return cls.from_dict(data).validate()
        except OSError as exc:
            raise UsageError(f"{path}: cannot read it: {exc.strerror or exc}") from None
        except UsageError as exc:
            raise UsageError(f"{path}: not a hicache run's config ({exc})") from None
        except (ValueError, TypeError, RecursionError) as exc:  # not JSON, too deep, or not a config's fields
            raise UsageError(f"{path}: not a hicache run's config ({_first_line(exc)})") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0][:200]


def StressConfig(  # noqa: N802 - the public name of the flat constructor since hicache's first API
    *,
    duration_s: float = 15.0,
    probe_hz: float = DEFAULT_PROBE_HZ,
    warmup_s: float | None = None,
    leak_threshold_mb_per_h: float = 100.0,
    stall_timeout_s: float = 5.0,
    launcher: str = LAUNCHERS[0],
    **model: Any,
) -> RunConfig:
    """A run of hicache's own model from flat settings (`pp`, `tp`, `policy`, `workload`,
    `seed`, ... as ModelTarget names them), as `hicache stress` takes them:
    `StressConfig(pp=2, policy="reap", duration_s=8.0)`."""
    return RunConfig(
        target=ModelTarget(**model),
        duration_s=duration_s,
        probe_hz=probe_hz,
        warmup_s=warmup_s,
        leak_threshold_mb_per_h=leak_threshold_mb_per_h,
        stall_timeout_s=stall_timeout_s,
        launcher=launcher,
    )


MEASUREMENT = ("duration_s", "probe_hz", "warmup_s", "leak_threshold_mb_per_h", "stall_timeout_s")


def legacy_config(data: dict[str, Any], where: str) -> dict[str, Any]:
    """A config.json (or a report's config) of the flat shape hicache wrote before targets
    were typed: `target` "model", "sglang" (with its `sglang` entry) or "trace" (with `trace`)."""
    kind = data.get("target", "model")
    flat = {k: v for k, v in data.items() if k not in ("target", "sglang", "trace")}
    measured = {k: flat.pop(k) for k in MEASUREMENT if k in flat}
    if kind == "trace" and isinstance(data.get("trace"), dict):
        trace = data["trace"]
        target = {
            "kind": "trace",
            "command": trace.get("command"),
            "loop": trace.get("loop"),
            "cwd": trace.get("cwd", ""),
        }
        if measured.get("duration_s") == 0:
            measured["duration_s"] = None  # 0 meant: until the program exits
    elif kind == "sglang" and isinstance(data.get("sglang"), dict):
        ranks = {k: v for k, v in flat.items() if k in _field_names(RankedTarget)}
        target = {"kind": "sglang", **ranks, **data["sglang"]}
    elif kind in ("model", None):
        target = {"kind": "model", **{k: v for k, v in flat.items() if k in _field_names(ModelTarget)}}
    else:
        raise ShapeError(f"{where or 'config'}.target: {kind!r}, expected model, sglang or trace")
    return {"target": target, **measured}


def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))


def check_types(record: Any) -> None:
    """Each field's value of the type its annotation names: a bool is no count, a float no
    pp, a string no seed. One line, as the CLI says it."""
    hints = typing.get_type_hints(type(record))
    for f in fields(record):
        value, hint = getattr(record, f.name), hints[f.name]
        if not _fits(value, hint):
            option = "--" + OPTIONS.get(f.name, f.name.replace("_", "-"))
            raise UsageError(f"{option} must be {_words(hint)}, got {value!r}")


def _fits(value: Any, hint: Any) -> bool:
    options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    for option in options:
        origin = typing.get_origin(option) or option
        if option is type(None) and value is None:
            return True
        if origin is int and isinstance(value, int) and not isinstance(value, bool):
            return True
        if origin is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return True
        if origin is str and isinstance(value, str):
            return True
        if origin is bool and isinstance(value, bool):
            return True
        if origin is tuple and isinstance(value, (tuple, list)):
            item = (typing.get_args(option) or (str,))[0]  # tuple[str, ...], tuple[int, ...]
            if all(_fits(v, item) for v in value):
                return True
        if isinstance(origin, type) and issubclass(origin, Target) and isinstance(value, Target):
            return True
    return False


def _words(hint: Any) -> str:
    names = {int: "a whole number", float: "a number", str: "text", bool: "true or false", type(None): "None"}
    options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    lists = {str: "a list of text", int: "a list of whole numbers"}
    return " or ".join(
        lists.get(typing.get_args(o)[0], "a list") if typing.get_origin(o) is tuple else names.get(o, "a target")
        for o in options
    )
