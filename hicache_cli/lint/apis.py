"""What calls mean to the analysis: which create Works (torch.distributed's, under any name),
which put values into a container, which read them back out, which wait, and which neither
keep nor wait what they are shown."""

from __future__ import annotations

from hicache_cli.lint.config import DIST

P2P_APIS = {f"{DIST}.isend": "isend", f"{DIST}.irecv": "irecv", f"{DIST}.batch_isend_irecv": "batch_isend_irecv"}
P2P_METHODS = frozenset(P2P_APIS.values())  # `group.isend(...)`-style wrappers
# torch.distributed's collectives that take async_op (and then return a Work).
COLLECTIVES = frozenset(
    {
        "all_reduce",
        "all_reduce_coalesced",
        "all_gather",
        "all_gather_into_tensor",
        "all_gather_coalesced",
        "_all_gather_base",
        "broadcast",
        "reduce",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "_reduce_scatter_base",
        "all_to_all",
        "all_to_all_single",
        "gather",
        "scatter",
        "barrier",
        # deepspeed.comm's own, under its names (a wrapper module counts as torch.distributed)
        *("all_gather_base", "reduce_scatter_base", "allgather_fn", "reduce_scatter_fn"),
    }
)


def method_api(name: str, async_op_given: bool) -> str | None:
    """The Work API a method of this name is on a value that is not the program's own:
    `group.isend(...)`, or a collective given async_op (`pg.all_reduce(t, async_op=...)`)."""
    if name in P2P_METHODS:
        return name
    if name in COLLECTIVES and async_op_given:
        return f"{name}(async_op=True)"
    return None


# A ProcessGroup's own methods: each returns a Work, always asynchronous (torch 2.13's
# `dir(torch.distributed.ProcessGroup)`; `monitored_barrier` blocks and returns none).
PROCESS_GROUP = f"{DIST}.ProcessGroup"
PG_WORK_METHODS = frozenset(
    {
        *("allreduce", "allreduce_coalesced", "allgather", "allgather_coalesced", "allgather_into_tensor_coalesced"),
        *("_allgather_base", "all_gather_single", "all_gather_single_coalesced", "broadcast", "reduce"),
        *("reduce_scatter", "_reduce_scatter_base", "reduce_scatter_single", "reduce_scatter_single_coalesced"),
        *("reduce_scatter_tensor_coalesced", "alltoall", "alltoall_base", "all_to_all_single", "gather", "scatter"),
        *("barrier", "send", "recv", "recv_anysource"),
    }
)
# torch.distributed's calls and names whose value is a ProcessGroup.
PG_FACTORIES = frozenset(
    {
        *(f"{DIST}.{name}" for name in ("new_group", "_get_default_group", "_new_group_with_tag", "ProcessGroup")),
        *(f"{DIST}.{name}" for name in ("ProcessGroupGloo", "ProcessGroupNCCL", "ProcessGroupMPI", "ProcessGroupUCC")),
        *(f"{DIST}.{name}" for name in ("group.WORLD", "GroupMember.WORLD", "_get_process_group_by_name")),
    }
)
PG_CLASSES = frozenset({PROCESS_GROUP, "torch._C._distributed_c10d.ProcessGroup"})


def receives(api: str) -> bool:
    """Whether a Work API's Work receives data (HC004): irecv, a collective (barrier aside), a
    ProcessGroup's recv or collective."""
    name = api.removeprefix("ProcessGroup.").split("(", 1)[0]
    if api.startswith("ProcessGroup."):
        return name not in ("send", "barrier")
    return name == "irecv" or (api.endswith("(async_op=True)") and name != "barrier")


# Methods that put their arguments into the container they are called on.
STORE_METHODS = frozenset(
    {"append", "extend", "insert", "add", "appendleft", "extendleft", "put", "put_nowait", "setdefault", "update"}
)
# Methods whose result is (part of) what the receiver holds, and that keep nothing they are given.
READ_METHODS = frozenset(
    {"pop", "popleft", "popitem", "get", "values", "items", "keys", "copy", "get_future", "then", "result", "value"}
)
# Calls that neither keep nor wait what they are given: logging, formatting, measuring.
INERT_CALLS = frozenset(
    {
        *("debug", "info", "warning", "warn", "error", "exception", "critical", "log", "format", "index", "count"),
        *("len", "bool", "print", "repr", "str", "int", "float", "isinstance", "issubclass", "id", "type", "hash"),
        *("any", "all", "sum", "min", "max", "callable", "hasattr", "range", "super", "abs", "round", "remove"),
        *("clear", "discard", "is_completed", "is_success", "exception", "done"),
    }
)
# Calls whose result holds what they are given.
PASS_THROUGH = frozenset(
    {"list", "tuple", "set", "frozenset", "sorted", "reversed", "iter", "next", "enumerate", "zip", "filter", "dict"}
)
PASS_THROUGH_QUALIFIED = frozenset(
    {
        "copy.copy",
        "copy.deepcopy",
        "itertools.chain",
        "itertools.islice",
        "collections.deque",
        "torch.futures.collect_all",
    }
)
WAIT_FUNCTIONS = frozenset({"wait_all", "wait"})  # torch.futures.wait_all, concurrent.futures.wait, helpers so named
