"""From `--target` and `--sglang-class` to what a run records and its ranks load."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path

from hicache_cli.sglang_target.extract import ExtractedClass, NotApplicable, extract
from hicache_cli.sglang_target.locate import CLASS_FILES, SGLangSource, TargetError, TargetSpec, locate
from hicache_cli.targets import RankedTarget, SGLangTarget

CLASS_CHOICES = ("auto", *CLASS_FILES)


@dataclass(frozen=True)
class Resolved:
    source: SGLangSource
    extracted: ExtractedClass

    def target(self, ranks: RankedTarget) -> SGLangTarget:
        """The run's target: `ranks`' shape and devices, SGLang's code in place of the model
        (enough for a rank to find the file again and check it is the one read here)."""
        shared = {f.name: getattr(ranks, f.name) for f in fields(RankedTarget)}
        return SGLangTarget(
            **{**shared, "workload": "idle"},
            version=self.source.version,
            origin=self.source.origin,
            location=self.source.location,
            class_name=self.extracted.class_name,
            file=self.extracted.path,
            sha256=self.extracted.sha256,
            tags_file=str(self.source.tags_file) if self.source.tags_file else "",
            drain_method=self.extracted.drain_method or "",
            unresolved=", ".join(self.extracted.unresolved),
        )


def resolve(spec: TargetSpec, class_name: str = "auto", progress: Callable[[str], None] | None = None) -> Resolved:
    """Locate the SGLang, pick the class, take its methods; NotApplicable without PP sync."""
    if class_name not in CLASS_CHOICES:
        raise TargetError(f"--sglang-class: {class_name!r}; choose one of: {', '.join(CLASS_CHOICES)}")
    source = locate(spec, progress)
    return Resolved(source, pick_class(source, class_name))


def pick_class(source: SGLangSource, class_name: str) -> ExtractedClass:
    """The named class, or with `auto` the first of HiRadixCache, UnifiedRadixCache that has a
    PP-sync path (HiRadixCache is gone from 0.5.21 on)."""
    if class_name != "auto":
        path = source.files.get(class_name)
        if path is None:
            raise NotApplicable(
                f"SGLang {source.version} ({source.location}) has no {Path(CLASS_FILES[class_name]).name}: "
                f"no {class_name} to test, not applicable"
            )
        return extract(path, class_name)
    if not source.files:
        raise TargetError(f"SGLang {source.version} ({source.location}): neither cache module found")
    first: NotApplicable | None = None
    for name, path in source.files.items():
        try:
            return extract(path, name)
        except NotApplicable as exc:
            first = first or exc
    assert first is not None
    raise first
