"""A command line's option groups (cli/options.py) from its options by name, each given to
the group that declares it: what configure.ranks_config takes, as a command would pass it."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from hicache_cli.cli.options import Measurement, Ranks, Rendezvous

GROUPS = {"ranks": Ranks, "measure": Measurement, "nodes": Rendezvous}


def ranks_options(**values: Any) -> dict[str, Any]:
    """`ranks_options(pp=2, duration="5s", nnodes=2)` -> {"ranks": Ranks(pp=2), "measure": ...}."""
    out = {}
    for key, group in GROUPS.items():
        names = {f.name for f in fields(group)} - {"given"}
        out[key] = group(**{k: v for k, v in values.items() if k in names})
    unknown = set(values) - {f.name for g in GROUPS.values() for f in fields(g)}
    assert not unknown, f"no group declares {sorted(unknown)}"
    return out
