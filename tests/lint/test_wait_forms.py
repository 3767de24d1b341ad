"""Every way real code waits the Works it keeps is seen as a wait (no HC001), and HC002 (when
selected) sees the same loops as drains (issue 24, item 5). Each form is written twice, so
each test also shows the form is what makes the difference: the same program polling instead
of waiting is HC001."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from hicache_cli.lint.engine import lint
from tests.lint.conftest import lint_snippet, write_tree

KEEPER = """
import torch.distributed as dist


class Pump:
    def __init__(self):
        self.works = []
        self.pairs = []

    def step(self, t):
        work = dist.isend(t, 1)
        self.works.append(work)
        self.pairs.append((t, work))

    def settle(self):
{settle}
"""

POLL = """
self.works = [w for w in self.works if not w.is_completed()]
self.pairs.clear()
"""

FORMS = {
    "filter with a lambda that waits": """
list(filter(lambda w: w.wait(), self.works))
self.pairs.clear()
""",
    "map with a lambda that waits": """
list(map(lambda w: w.wait(), self.works))
self.pairs.clear()
""",
    "range(len(x)) and x[i]": """
for i in range(len(self.works)):
    self.works[i].wait()
self.pairs.clear()
""",
    "enumerate": """
for i, w in enumerate(self.works):
    w.wait()
self.pairs.clear()
""",
    "tuple unpacking": """
for t, w in self.pairs:
    w.wait()
self.works.clear()
""",
    "while x: x.pop().wait()": """
while self.works:
    self.works.pop().wait()
self.pairs.clear()
""",
    "a comprehension of waits": """
[w.wait() for w in self.works]
self.pairs.clear()
""",
    "the oldest first, popleft-style": """
while self.works:
    oldest = self.works.pop(0)
    oldest.wait()
self.pairs.clear()
""",
}


def source(settle: str) -> str:
    return KEEPER.format(settle=textwrap.indent(settle.strip("\n"), " " * 8))


def test_the_polling_version_is_found() -> None:
    """The baseline every form below is compared with: polling only is HC001."""
    findings = lint_snippet(source(POLL), "HC001")
    assert [f.rule for f in findings] == ["HC001"]


@pytest.mark.parametrize("settle", FORMS.values(), ids=FORMS.keys())
def test_each_wait_form_is_a_wait(settle: str) -> None:
    assert lint_snippet(source(settle), "HC001") == []


DRAIN_FORMS = {
    k: v for k, v in FORMS.items() if k not in ("map with a lambda that waits", "filter with a lambda that waits")
}


@pytest.mark.parametrize("settle", DRAIN_FORMS.values(), ids=DRAIN_FORMS.keys())
def test_hc002_sees_each_loop_form_as_a_drain(settle: str) -> None:
    [finding] = lint_snippet(source(settle), "HC002")
    assert "calls wait() with no timeout, outside try/finally" in finding.message
    assert finding.function == "Pump.settle"


@pytest.mark.parametrize("settle", DRAIN_FORMS.values(), ids=DRAIN_FORMS.keys())
def test_hc002_is_quiet_when_each_form_has_a_timeout(settle: str) -> None:
    assert lint_snippet(source(settle.replace(".wait()", ".wait(timeout)")), "HC002") == []


HELPERS = {
    "a function of another module": {
        "pkg/__init__.py": "",
        "pkg/waiting.py": "def wait_all(works):\n    for work in works:\n        work.wait()\n",
        "pkg/pump.py": (
            "import torch.distributed as dist\nfrom pkg.waiting import wait_all\n\n\nclass Pump:\n"
            "    def __init__(self):\n        self.works = []\n\n    def step(self, t):\n"
            "        self.works.append(dist.isend(t, 1))\n\n    def settle(self):\n"
            "        {settle}(self.works)\n        self.works = [w for w in self.works if not w.is_completed()]\n"
        ),
    },
    "a method of a helper object of another module": {
        "pkg/__init__.py": "",
        "pkg/waiting.py": (
            "class Settler:\n    def settle(self, works):\n        for work in works:\n            work.wait()\n"
        ),
        "pkg/pump.py": (
            "import torch.distributed as dist\nfrom pkg.waiting import Settler\n\n\nclass Pump:\n"
            "    def __init__(self):\n        self.works = []\n        self.settler = Settler()\n\n"
            "    def step(self, t):\n        self.works.append(dist.isend(t, 1))\n\n    def settle(self):\n"
            "        self.settler.{settle}(self.works)\n"
            "        self.works = [w for w in self.works if not w.is_completed()]\n"
        ),
    },
}


@pytest.mark.parametrize("files", HELPERS.values(), ids=HELPERS.keys())
def test_a_helper_that_waits_what_it_is_given(files: dict[str, str], tmp_path: Path) -> None:
    """The helper's module holds no trigger word: it is analysed because the Works go there."""
    waits = "wait_all" if "wait_all" in files["pkg/waiting.py"] else "settle"
    write_tree(tmp_path / "waits", {k: v.replace("{settle}", waits) for k, v in files.items()})
    assert lint([str(tmp_path / "waits")], ["HC001"]).findings == []
    renamed = {k: v.replace("work.wait()", "work.is_completed()") for k, v in files.items()}
    write_tree(tmp_path / "polls", {k: v.replace("{settle}", waits) for k, v in renamed.items()})
    assert [f.rule for f in lint([str(tmp_path / "polls")], ["HC001"]).findings] == ["HC001"]


def test_a_bound_wait_handed_to_a_wrapper_is_a_wait() -> None:
    """DeepSpeed's `instrument_w_nvtx(self.handle.wait)()`: the bound method is called later."""
    found = lint_snippet(
        """
        import torch.distributed as dist
        def instrument(fn):
            return fn
        class Handle:
            def __init__(self, t):
                self.handle = dist.all_reduce(t, async_op=True)
            def wait(self):
                instrument(self.handle.wait)()
        """,
        "HC001",
    )
    assert found == []


def test_a_method_named_wait_that_stores_is_not_a_wait() -> None:
    """chitu's `Task.wait(handle)` keeps the handle: calling it waits nothing."""
    found = lint_snippet(
        """
        import torch.distributed as dist
        class Task:
            def __init__(self):
                self.handle = None
            def wait(self, handle):
                self.handle = handle
        class Executor:
            def __init__(self):
                self.pending = []
            def recv(self, buf, task: Task):
                handle = dist.irecv(buf, 0)
                self.pending.append(handle)
                task.wait(handle)
            def reap(self):
                self.pending = [h for h in self.pending if not h.is_completed()]
        """,
        "HC001",
    )
    assert [f.rule for f in found] == ["HC001"]
