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
