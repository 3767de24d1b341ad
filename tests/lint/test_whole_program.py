"""A target is one program: names resolve across its modules (relative and absolute imports,
re-exports, star imports), wrapper modules stand for torch.distributed, and `async_op` passed
down as a variable is resolved from callers and defaults (issue 24, items 1, 3, 4)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hicache_cli.errors import UsageError
from hicache_cli.lint.engine import lint
from tests.lint.conftest import write_tree

REAPER = """
class Keeper:
    def __init__(self):
        self.works = []

    def keep(self, work):
        self.works.append(work)

    def reap(self):
        self.works = [w for w in self.works if not w.is_completed()]
"""


def rules_in(root: Path, *extra: str) -> list[tuple[str, str, int]]:
    result = lint([str(root)], ["all"], wrappers=extra)
    assert result.problems == [], result.problems
    return [(Path(f.file).name, f.rule, f.line) for f in result.findings]


IMPORTS = {
    "a relative import": ("from .comm import start", "start(t)"),
    "an absolute import": ("from pkg.comm import start", "start(t)"),
    "a module imported whole": ("from pkg import comm", "comm.start(t)"),
    "a re-export in the package's __init__": ("from pkg import start", "start(t)"),
    "a star import": ("from pkg.comm import *", "start(t)"),
}


@pytest.mark.parametrize(("how", "call"), IMPORTS.values(), ids=IMPORTS.keys())
def test_a_function_of_another_module_returning_a_work(how: str, call: str, tmp_path: Path) -> None:
    write_tree(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.comm import start\n",
            "pkg/comm.py": "import torch.distributed as dist\n\ndef start(t):\n    return dist.isend(t, 1)\n",
            "pkg/keeper.py": REAPER,
            "pkg/sched.py": f"{how}\nfrom .keeper import Keeper\n\nK = Keeper()\n\ndef step(t):\n    K.keep({call})\n",
        },
    )
    assert rules_in(tmp_path) == [("sched.py", "HC001", 7)]


WRAPPERS = {
    "deepspeed.comm (known)": ("from deepspeed import comm as dist", ()),
    "a module named with --wrapper": ("import mycomm as dist", ("mycomm",)),
}


@pytest.mark.parametrize(("imported", "extra"), WRAPPERS.values(), ids=WRAPPERS.keys())
def test_a_wrapper_module_stands_for_torch_distributed(imported: str, extra: tuple[str, ...], tmp_path: Path) -> None:
    write_tree(
        tmp_path,
        {"train.py": f"{imported}\n" + REAPER + "\n    def step(self, t):\n        self.keep(dist.isend(t, 1))\n"},
    )
    assert rules_in(tmp_path, *extra) == [("train.py", "HC001", 14)]


def test_without_the_wrapper_named_only_the_poll_only_reaper_is_seen(tmp_path: Path) -> None:
    """mycomm.isend is code the program cannot see: its result is not known to be a Work, but
    the list only polled with is_completed() is still a finding (HC005), at the poll."""
    body = "import mycomm as dist\n" + REAPER + "\n    def step(self, t):\n        self.keep(dist.isend(t, 1))\n"
    write_tree(tmp_path, {"train.py": body})
    assert rules_in(tmp_path) == [("train.py", "HC005", 11)]


RE_EXPORTS = {
    "a star import of torch.distributed": "from torch.distributed import *\n",
    "a name imported from torch.distributed, re-exported": "from torch.distributed import isend\n",
    "an alias assigned at module level": "import torch.distributed as dist\nisend = dist.isend\n",
}


@pytest.mark.parametrize("comm", RE_EXPORTS.values(), ids=RE_EXPORTS.keys())
def test_a_module_re_exporting_torch_distributed_is_torch_distributed(comm: str, tmp_path: Path) -> None:
    write_tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/comm.py": comm,
            "pkg/user.py": "from pkg import comm\n"
            + REAPER
            + "\n    def step(self, t):\n        self.keep(comm.isend(t, 1))\n",
        },
    )
    assert rules_in(tmp_path) == [("user.py", "HC001", 14)]


def test_pyproject_names_wrappers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_tree(
        tmp_path,
        {
            "pyproject.toml": '[tool.hicache.lint]\nwrappers = ["mycomm"]\nselect = ["HC001"]\n',
            "src/train.py": "import mycomm as dist\n"
            + REAPER
            + "\n    def step(self, t):\n        self.keep(dist.isend(t, 1))\n",
        },
    )
    monkeypatch.chdir(tmp_path)
    result = lint(["src"])
    assert [(f.rule, f.line) for f in result.findings] == [("HC001", 14)]
    assert result.rules == ["HC001"]


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("[tool.hicache.lint]\nwrappers = 3\n", "wrappers must be a list of strings"),
        ("[tool.hicache.lint]\nwrapper = []\n", "unknown key wrapper (known: wrappers, select)"),
        ("[tool.hicache.lint\n", "not valid TOML"),
        ('[tool.hicache.lint]\nwrappers = ["not a module"]\n', "'not a module' is not a dotted module name"),
    ],
)
def test_a_bad_pyproject_is_one_line(toml: str, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_tree(tmp_path, {"pyproject.toml": toml, "a.py": "x = 1\n"})
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match=re.escape(message)):
        lint(["a.py"])


ASYNC_OP = """
import torch.distributed as dist
from keeper import Keeper

K = Keeper()


def reduce(t, async_op=False):
    return dist.all_reduce(t, async_op=async_op)


def layer(t, overlap):
    K.keep(reduce(t, async_op=overlap))


def train(t):
    {call}
"""


def test_async_op_passed_down_as_true_makes_a_work(tmp_path: Path) -> None:
    write_tree(tmp_path, {"keeper.py": REAPER, "model.py": ASYNC_OP.replace("{call}", "layer(t, overlap=True)")})
    assert rules_in(tmp_path) == [("model.py", "HC001", 13)]


@pytest.mark.parametrize("call", ["layer(t, overlap=False)", "pass"])
def test_async_op_never_true_is_no_work(call: str, tmp_path: Path) -> None:
    write_tree(tmp_path, {"keeper.py": REAPER, "model.py": ASYNC_OP.replace("{call}", call)})
    assert [f for f in rules_in(tmp_path) if f[1] == "HC001"] == []


def test_a_default_of_true_makes_a_work(tmp_path: Path) -> None:
    source = (
        ASYNC_OP.replace("async_op=False", "async_op=True").replace("async_op=overlap", "").replace("{call}", "pass")
    )
    write_tree(tmp_path, {"keeper.py": REAPER, "model.py": source})
    assert rules_in(tmp_path) == [("model.py", "HC001", 13)]


def test_a_module_level_list_filled_elsewhere(tmp_path: Path) -> None:
    write_tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/state.py": "PENDING = []\n",
            "pkg/send.py": "import torch.distributed as dist\nfrom pkg.state import PENDING\n\n"
            "def send(t):\n    PENDING.append(dist.isend(t, 1))\n",
            "pkg/reap.py": "from pkg import state\n\ndef reap():\n"
            "    while state.PENDING and state.PENDING[0].is_completed():\n        state.PENDING.pop(0)\n",
        },
    )
    assert rules_in(tmp_path) == [("send.py", "HC001", 5)]
    (tmp_path / "pkg" / "drain.py").write_text(
        "from pkg.state import PENDING\n\ndef drain():\n    for w in PENDING:\n        w.wait()\n", encoding="utf-8"
    )
    assert rules_in(tmp_path) == [("drain.py", "HC002", 5)]  # waited (no timeout: HC002, selected here)


def test_a_mixin_s_attribute_is_its_host_s(tmp_path: Path) -> None:
    """The mixin keeps Works in self.works, which only its host (another module) assigns and
    drains: no finding; drop the drain and the mixin's send is found."""
    files = {
        "pkg/__init__.py": "",
        "pkg/mixin.py": "import torch.distributed as dist\n\nclass SendMixin:\n    def send(self, t):\n"
        "        self.works.append(dist.isend(t, 1))\n",
        "pkg/host.py": "from pkg.mixin import SendMixin\n\nclass Host(SendMixin):\n    def __init__(self):\n"
        "        self.works = []\n\n    def drain(self):\n        for w in self.works:\n            w.wait()\n"
        "        self.works.clear()\n",
    }
    write_tree(tmp_path, files)
    assert rules_in(tmp_path) == [("host.py", "HC002", 9)]  # the drain, no timeout (HC002 is selected here)
    files["pkg/host.py"] = files["pkg/host.py"].replace("w.wait()", "w.is_completed()")
    write_tree(tmp_path, files)
    assert rules_in(tmp_path) == [("mixin.py", "HC001", 5)]


def test_sibling_classes_keep_their_own_attributes(tmp_path: Path) -> None:
    """Two subclasses of one base each assign self.works: one drains, one only polls. Only the
    poller is found (a shared base does not make their attributes one place)."""
    write_tree(
        tmp_path,
        {
            "base.py": "class Base:\n    pass\n",
            "a.py": "import torch.distributed as dist\nfrom base import Base\n\nclass A(Base):\n"
            "    def __init__(self):\n        self.works = []\n\n    def step(self, t):\n"
            "        self.works.append(dist.isend(t, 1))\n\n    def drain(self):\n"
            "        for w in self.works:\n            w.wait(timeout=T)\n",
            "b.py": "import torch.distributed as dist\nfrom base import Base\n\nclass B(Base):\n"
            "    def __init__(self):\n        self.works = []\n\n    def step(self, t):\n"
            "        self.works.append(dist.isend(t, 1))\n\n    def reap(self):\n"
            "        self.works = [w for w in self.works if not w.is_completed()]\n",
        },
    )
    assert rules_in(tmp_path) == [("b.py", "HC001", 9)]


def test_a_dist_imported_in_another_module_is_torch_distributed(tmp_path: Path) -> None:
    """`import torch.distributed as dist` in comm.py, `from pkg.comm import dist` elsewhere."""
    write_tree(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/comm.py": "import torch.distributed as dist\n",
            "pkg/user.py": "from pkg.comm import dist\n"
            + REAPER
            + "\n    def step(self, t):\n        self.keep(dist.isend(t, 1))\n",
        },
    )
    assert rules_in(tmp_path) == [("user.py", "HC001", 14)]


def test_files_named_together_are_one_program(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_tree(
        tmp_path,
        {
            "comm.py": "import torch.distributed as dist\n\ndef start(t):\n    return [dist.isend(t, 1)]\n",
            "sched.py": "from comm import start\n"
            + REAPER
            + "\n    def step(self, t):\n        self.works.extend(start(t))\n",
        },
    )
    monkeypatch.chdir(tmp_path)
    assert [(f.file, f.line) for f in lint(["comm.py", "sched.py"]).findings] == [("sched.py", 14)]
    alone = lint(["sched.py"]).findings  # start() is code it cannot see: only the reaper is known
    assert [(f.file, f.rule) for f in alone] == [("sched.py", "HC005")]


CHUNKS = {
    "chunk.py": """
        import torch.distributed as dist


        class Chunk:
            def __init__(self, data):
                self.data = data
                self.work = None

            def reduce(self, async_op=False):
                self.work = dist.all_reduce(self.data, async_op=async_op)

            def wait_reduce(self):
                if self.work is not None:
                    self.work.wait()
                    self.work = None
        """,
    "manager.py": """
        from chunk import Chunk


        class Manager:
            def reduce_chunk(self, chunk: Chunk, async_op: bool = False) -> bool:
                chunk.reduce(async_op=async_op)
                return True
        """,
    "hook.py": """
        from manager import Manager


        def grad_hook(chunk, manager: Manager, stream=None):
            overlap = stream is not None
            if manager.reduce_chunk(chunk, async_op=overlap):
                chunk.wait_reduce()
        """,
}


def test_a_method_of_a_program_class_named_like_a_collective_is_followed_into(tmp_path: Path) -> None:
    """ColossalAI's shape: `chunk.reduce(async_op=...)` on a `chunk: Chunk` is Chunk.reduce,
    not torch's reduce, and `overlap = stream is not None` may be True: the Work is the
    all_reduce inside, kept in the chunk, waited by wait_reduce. A change that drops the wait
    is found; before, the call was taken for a collective whose async_op was never True."""
    write_tree(tmp_path, CHUNKS)
    assert rules_in(tmp_path) == []
    unwaited = CHUNKS["chunk.py"].replace("self.work.wait()", "pass")
    write_tree(tmp_path, {"chunk.py": unwaited})
    assert rules_in(tmp_path) == [("chunk.py", "HC001", 11)]


@pytest.mark.parametrize("flag", ["stream is not None", "not synchronous", "world > 1"])
def test_a_truth_value_in_a_variable_may_reach_async_op_as_true(flag: str, tmp_path: Path) -> None:
    source = f"""
        import torch.distributed as dist

        PENDING = []


        def step(t, stream, synchronous, world):
            overlap = {flag}
            PENDING.append(dist.all_reduce(t, async_op=overlap))
        """
    write_tree(tmp_path, {"step.py": source})
    assert rules_in(tmp_path) == [("step.py", "HC001", 9)]


def test_collectives_inside_a_coalescing_manager_hand_out_no_work(tmp_path: Path) -> None:
    """Megatron's shape: inside `with _coalescing_manager(group, async_ops=...) as cm` each
    collective is queued and returns no Work (the manager is waited); a statement there drops
    nothing. The same call outside the block does."""
    source = """
        import torch.distributed as dist
        from torch.distributed.distributed_c10d import _coalescing_manager


        def reduce_all(buckets, group, overlap):
            async_op = overlap is not None
            with _coalescing_manager(group, async_ops=async_op) as cm:
                for bucket in buckets:
                    dist.all_reduce(bucket, group=group, async_op=async_op)
            if async_op:
                return cm
            cm.wait()
            dist.all_reduce(buckets[0], group=group, async_op=async_op)
        """
    write_tree(tmp_path, {"buckets.py": source})
    assert rules_in(tmp_path) == [("buckets.py", "HC004", 14)]


def test_async_op_passed_to_a_method_of_an_attributes_class_is_followed(tmp_path: Path) -> None:
    """`self.manager.reduce_bucket(t, async_op=True)`, the manager made in __init__ from
    another module: the call goes to Manager.reduce_bucket, whose collective keeps its Work."""
    write_tree(
        tmp_path,
        {
            "manager.py": """
                import torch.distributed as dist


                class Manager:
                    def __init__(self):
                        self.pending = []

                    def reduce_bucket(self, t, async_op=False):
                        self.pending.append(dist.all_reduce(t, async_op=async_op))
                """,
            "model.py": """
                from manager import Manager


                class Model:
                    def __init__(self):
                        self.manager = Manager()

                    def step(self, t):
                        self.manager.reduce_bucket(t, async_op=True)
                """,
        },
    )
    assert rules_in(tmp_path) == [("manager.py", "HC001", 10)]


def test_a_program_class_without_the_method_is_taken_for_the_work_api(tmp_path: Path) -> None:
    """`group: Group; group.isend(...)` where the program's Group inherits isend from outside
    the program: the Work API, as on a value of unknown class."""
    source = """
        from torch.distributed import ProcessGroup

        PENDING = []


        class Group(ProcessGroup):
            def label(self):
                return "pp"


        def step(t, group: Group):
            PENDING.append(group.isend([t], 1, 0))
        """
    write_tree(tmp_path, {"step.py": source})
    assert rules_in(tmp_path) == [("step.py", "HC001", 13)]
