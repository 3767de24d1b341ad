"""A seeded, round-indexed request stream with shared prefixes and idle stretches.

Every rank of the pipeline builds the same stream from the same seed and asks it for
the request of round r, so that all stages issue the same copies in the same rounds and
the counts PP0 sends downstream are applicable there, as in a real PP deployment.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class WorkloadSpec:
    name: str = "mixed"
    request_rate: float = 0.5  # probability that a busy round admits a request
    prefix_sharing: float = 0.7  # fraction of requests that start with a shared prefix
    idle_fraction: float = 0.5  # fraction of each cycle's rounds in which nothing arrives
    cycle_rounds: int = 400  # a cycle is a busy stretch followed by an idle one
    shared_prefixes: int = 16
    prefix_tokens: int = 48
    suffix_tokens: int = 16
    decode_rounds: int = 4  # rounds a request holds its prefix locked

    def __post_init__(self) -> None:
        for field_name in ("request_rate", "prefix_sharing", "idle_fraction"):
            value = getattr(self, field_name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{field_name} must be between 0 and 1, got {value}")


PRESETS: dict[str, WorkloadSpec] = {
    "mixed": WorkloadSpec(),
    "busy": WorkloadSpec(name="busy", idle_fraction=0.0, request_rate=0.8),
    # The incident's case: an idle server whose loop spins, syncing every round.
    "idle": WorkloadSpec(name="idle", idle_fraction=1.0, request_rate=0.0),
}


def workload_spec(preset: str, **overrides: float) -> WorkloadSpec:
    if preset not in PRESETS:
        raise ValueError(f"unknown workload {preset!r}; choose one of: {', '.join(PRESETS)}")
    set_overrides = {k: v for k, v in overrides.items() if v is not None}
    return replace(PRESETS[preset], **set_overrides)


class Workload:
    def __init__(self, spec: WorkloadSpec, seed: int) -> None:
        self.spec = spec
        rng = random.Random(seed)
        self._rng = rng
        self._prefixes = [
            tuple(rng.randrange(1, 32000) for _ in range(spec.prefix_tokens)) for _ in range(spec.shared_prefixes)
        ]
        self._busy_rounds = round((1.0 - spec.idle_fraction) * spec.cycle_rounds)

    def is_busy(self, round_index: int) -> bool:
        return round_index % self.spec.cycle_rounds < self._busy_rounds

    def request_for(self, round_index: int) -> tuple[int, ...] | None:
        """The tokens of the request arriving in round `round_index`, if any.

        Rounds must be asked for in order; idle rounds draw no random numbers.
        """
        if not self.is_busy(round_index):
            return None
        rng, spec = self._rng, self.spec
        if rng.random() >= spec.request_rate:
            return None
        suffix = tuple(rng.randrange(1, 32000) for _ in range(spec.suffix_tokens))
        if rng.random() < spec.prefix_sharing:
            return rng.choice(self._prefixes) + suffix
        return tuple(rng.randrange(1, 32000) for _ in range(spec.prefix_tokens)) + suffix
