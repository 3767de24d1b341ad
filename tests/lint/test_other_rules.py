"""HC002 (a drain with no timeout, outside try/finally), HC003 (a sent tensor changed while
its dropped isend may still read it), HC004 (a receiving Work dropped)."""

from __future__ import annotations

import pytest

from hicache_cli.lint.rules import RULES, default_rules
from tests.lint.conftest import line_of, lint_snippet, rule_lines
from tests.lint.test_kept_never_waited import SGLANG_0_5_15


def test_hc002_is_off_by_default_and_the_others_on() -> None:
    assert default_rules() == ["HC001", "HC003", "HC004", "HC005"]
    assert RULES["HC002"].level == "warning"


def test_hc002_finds_the_fix_s_drain() -> None:
    [finding] = lint_snippet(SGLANG_0_5_15, "HC002")
    assert finding.line == line_of(SGLANG_0_5_15, "work.wait()")
    assert finding.function == "HiRadixCache._drain_async_work"
    assert "no timeout" in finding.message and "self.work_list is never cleared" in finding.message


DRAIN = """
import torch.distributed as dist
class C:
    def __init__(self):
        self.works = []
    def step(self, t):
        self.works.append(dist.isend(t, 1))
    def drain(self):
{body}
"""

SAFE_DRAINS = {
    "with a timeout": "        for w in self.works:\n            w.wait(self.timeout)\n        self.works.clear()",
    "with a timeout keyword": "        for w in self.works:\n            w.wait(timeout=T)\n        self.works.clear()",
    "in try/finally": "        try:\n            for w in self.works:\n                w.wait()\n        finally:\n"
    "            self.works.clear()",
}


@pytest.mark.parametrize("body", SAFE_DRAINS.values(), ids=SAFE_DRAINS.keys())
def test_hc002_passes_a_bounded_or_guarded_drain(body: str) -> None:
    assert lint_snippet(DRAIN.format(body=body), "HC002") == []


def test_hc002_comprehension_drain_is_found() -> None:
    source = DRAIN.format(body="        [w.wait() for w in self.works]\n        self.works.clear()")
    assert rule_lines(source, "HC002") == [("HC002", line_of(source, "[w.wait()"))]


def test_hc002_ignores_a_local_list_s_drain() -> None:
    source = """
        import torch.distributed as dist
        def fan_out(t, dsts):
            works = [dist.isend(t, d) for d in dsts]
            for w in works:
                w.wait()
        """
    assert lint_snippet(source, "HC002") == []


MUTATED = {
    "an in-place method": "    t.add_(1)",
    "an item assignment": "    t[0] = 5",
    "an augmented assignment": "    t += 1",
    "out=": "    torch.add(a, b, out=t)",
}


@pytest.mark.parametrize("change", MUTATED.values(), ids=MUTATED.keys())
def test_hc003_a_dropped_isend_then_a_change_in_place(change: str) -> None:
    source = f"import torch\nimport torch.distributed as dist\ndef step(t, a, b):\n    dist.isend(t, 1)\n{change}\n"
    [finding] = lint_snippet(source, "HC003")
    assert (finding.line, finding.function) == (4, "step")
    assert "`t` is changed in place at line 5" in finding.message
    assert finding.message.endswith("a send whose Work is dropped is never delivered at all)")


def test_hc003_on_an_attribute_and_a_work_bound_to_a_name_never_read() -> None:
    source = """
        import torch.distributed as dist
        class C:
            def step(self):
                work = dist.isend(self.buf, 1)
                self.buf.copy_(self.next)
        """
    assert rule_lines(source, "HC003") == [("HC003", line_of(source, "dist.isend"))]


HC003_CLEAN = {
    "a clone is sent": "    dist.isend(t.clone(), 1)\n    t.add_(1)",
    "the Work is waited": "    w = dist.isend(t, 1)\n    w.wait()\n    t.add_(1)",
    "the name is rebound first": "    dist.isend(t, 1)\n    t = torch.zeros(2)\n    t.add_(1)",
    "changed before the send": "    t.add_(1)\n    dist.isend(t, 1)",
    "an irecv": "    dist.irecv(t, 1)\n    t.add_(1)",
}


@pytest.mark.parametrize("body", HC003_CLEAN.values(), ids=HC003_CLEAN.keys())
def test_hc003_clean(body: str) -> None:
    source = f"import torch\nimport torch.distributed as dist\ndef step(t):\n{body}\n"
    assert lint_snippet(source, "HC003") == []


def test_hc004_dropped_receives() -> None:
    source = """
        import torch.distributed as dist
        def step(buf, t):
            dist.irecv(buf, 0)
            dist.all_reduce(t, async_op=True)
            dist.barrier(async_op=True)
            dist.irecv(buf, 0).wait()
            w = dist.all_gather_into_tensor(buf, t, async_op=True)
            w.wait()
        """
    findings = lint_snippet(source, "HC004")
    assert [(f.line, f.function) for f in findings] == [(4, "step"), (5, "step")]
    assert findings[0].message.startswith("the Work from irecv into `buf` is dropped")
    assert findings[1].message.startswith("the Work from all_reduce(async_op=True) into `t` is dropped")
    # what hicache doctor measured: a dropped irecv's data never lands on gloo; a collective's does
    lost = "on gloo it never arrives at all, nor does anything after it from that peer in that group"
    assert findings[0].message.endswith(f"race with the receive; {lost}")
    assert lost not in findings[1].message


def test_hc004_is_a_note_when_a_later_work_on_the_same_group_is_waited() -> None:
    """lmdeploy's broadcast: two dropped broadcasts, then a third on the same group whose Work is
    returned and waited. On NCCL's stream that wait orders the earlier ones; the finding says
    so, as a note (no exit 1), and a dropped receive on another group stays an error."""
    source = """
        import torch.distributed as dist
        class Extra:
            def broadcast(self, src, group, other):
                dist.broadcast(self.a, src=src, group=group, async_op=True)
                dist.broadcast(self.b, src=src, group=other, async_op=True)
                handle = dist.broadcast(self.c, src=src, group=group, async_op=True)
                return handle
        def step(extra: Extra, group, other):
            extra.broadcast(0, group, other).wait()
        """
    first, second = lint_snippet(source, "HC004")
    assert (first.line, first.level) == (line_of(source, "self.a"), "note")
    assert first.message.startswith("the Work from broadcast(async_op=True) into `self.a` is dropped; the ")
    assert f"on the same group (line {line_of(source, 'self.c')}) is waited" in first.message
    assert (second.line, second.level) == (line_of(source, "self.b"), "")


HC005_FOUND = """
from mylib import start_send


class Pump:
    def __init__(self):
        self.pending = []

    def step(self, t):
        self.pending.extend(start_send(t))

    def reap(self):
        while self.pending and self.pending[0].is_completed():
            self.pending.pop(0)
"""


def test_hc005_a_reaper_that_only_polls_works_it_cannot_see_made() -> None:
    [finding] = lint_snippet(HC005_FOUND, "HC005", "HC001")
    assert finding.rule == "HC005"
    assert finding.line == line_of(HC005_FOUND, "is_completed()")
    assert finding.message.startswith(
        f"self.pending (line {line_of(HC005_FOUND, '.extend(')}, Pump.step) is reaped only by is_completed()"
    )
    assert "on gloo a send Work never completes until it is waited, so this container grows" in finding.message
    assert [(r.line, r.message) for r in finding.related] == [
        (line_of(HC005_FOUND, ".extend("), "kept in self.pending")
    ]


HC005_CLEAN = {
    "a drain waits them too": HC005_FOUND
    + "\n    def drain(self):\n        for w in self.pending:\n            w.wait()\n",
    "they are handed on": HC005_FOUND + "\n    def flush(self, pool):\n        pool.submit(self.pending)\n",
    "nothing is dropped from it (not a reaper)": HC005_FOUND.replace("self.pending.pop(0)", "break"),
    "the elements are tasks with their own is_completed()": HC005_FOUND.replace(
        "from mylib import start_send", "class Task:\n    def is_completed(self):\n        return True\n"
    ).replace("start_send(t)", "[Task()]"),
    "the Works are seen: HC001's, not HC005's": HC005_FOUND.replace(
        "from mylib import start_send", "import torch.distributed as dist"
    ).replace("start_send(t)", "[dist.isend(t, 1)]"),
}


@pytest.mark.parametrize("source", HC005_CLEAN.values(), ids=HC005_CLEAN.keys())
def test_hc005_quiet(source: str) -> None:
    assert lint_snippet(source, "HC005") == []
