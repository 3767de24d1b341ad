"""tracer/session.py: a traced process's probe writes its final line however it is closed
(the program's exit, hicache's stop), with its last sites, in the rank probe's format."""

from __future__ import annotations

import io
import time
from pathlib import Path

from hicache_cli.rank.probe import LoopStats, RankIdentity, Readings
from hicache_cli.sample import LineDecoder
from hicache_cli.tracer.session import TracedProbe
from hicache_cli.tracer.works import WorkTable


def probe(tmp_path: Path, out: io.StringIO) -> TracedProbe:
    now = time.monotonic()
    return TracedProbe(
        RankIdentity(0, 0, 0, 0, "h"),
        LoopStats(),
        lambda: Readings(works={"created": 0, "waited": 0, "completed": 0, "dropped": 0, "live": 0}),
        out,
        hz=10.0,
        started=now,
        deadline=float("inf"),
        stop_grace_s=1.0,
        stop_file=tmp_path / "stop",
        table=WorkTable(),
    )


def test_a_closed_probe_writes_its_final_line_with_its_sites(tmp_path: Path) -> None:
    out = io.StringIO()
    traced = probe(tmp_path, out)
    traced.close("error", "ValueError: boom")  # the program's atexit: it raised
    (line,) = out.getvalue().splitlines()
    final = LineDecoder().decode(line)
    assert (final.kind, final.state, final.message) == ("final", "error", "ValueError: boom")
    assert final.sites == []  # a final line always carries the sites (none here)
    assert final.error_kind is None  # a traced program's error is its own, not classified


def test_a_second_close_writes_nothing(tmp_path: Path) -> None:
    out = io.StringIO()
    traced = probe(tmp_path, out)
    traced.close("done", "stopped by hicache at the end of the trace")
    traced.close("error", "too late")
    assert len(out.getvalue().splitlines()) == 1
