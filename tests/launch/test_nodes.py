"""nodes.node_spec: the multi-node options checked into a NodeSpec, or refused in one line."""

from __future__ import annotations

import dataclasses
import socket
from typing import Any

import pytest

from hicache_cli.errors import UsageError
from hicache_cli.launch.nodes import NodeSpec, node_spec

SECRET = "0123456789abcdef-secret"  # what an operator gives every node of a run across machines

# world_size, nnodes, node_rank, nproc_per_node, rdzv_endpoint, rdzv_id, sample_port
GOOD: dict[str, Any] = {
    "world_size": 4,
    "nnodes": 2,
    "node_rank": 0,
    "nproc_per_node": None,
    "rdzv_endpoint": "127.0.0.1:29500",
    "rdzv_id": "hicache",
    "sample_port": None,
}


def spec(**changes: Any) -> NodeSpec | None:
    return node_spec(**{**GOOD, **changes})


def test_one_node_without_multi_node_options_is_none() -> None:
    assert node_spec(4, 1, None, None, None, "hicache", None) is None


def test_one_node_ignores_the_default_rdzv_id() -> None:
    assert node_spec(4, 1, None, None, None, "anything/with/slashes", None) is None


def test_defaults_split_the_world_and_put_samples_on_the_next_port() -> None:
    assert spec() == NodeSpec(
        nnodes=2,
        node_rank=0,
        nproc_per_node=2,
        rdzv_host="127.0.0.1",
        rdzv_port=29500,
        rdzv_id="hicache",
        sample_port=29501,
    )


def test_given_values_are_kept() -> None:
    got = spec(
        world_size=8,
        nnodes=4,
        node_rank=3,
        nproc_per_node=2,
        rdzv_endpoint="node0.cluster:1234",
        rdzv_id="run-7",
        sample_port=4000,
        run_secret=SECRET,
    )
    assert got == NodeSpec(4, 3, 2, "node0.cluster", 1234, "run-7", 4000, SECRET)
    assert got is not None
    assert got.endpoint == "node0.cluster:1234"
    assert not got.is_head


def test_node_zero_is_the_head() -> None:
    head, other = spec(node_rank=0), spec(node_rank=1)
    assert head is not None and other is not None
    assert head.is_head
    assert not other.is_head


def test_nproc_per_node_defaults_to_world_over_nnodes() -> None:
    got = spec(world_size=12, nnodes=3, node_rank=2)
    assert got is not None
    assert got.nproc_per_node == 4


def test_the_edge_ports_are_accepted() -> None:
    got = spec(rdzv_endpoint="h:1", sample_port=65535, run_secret=SECRET)
    assert got is not None
    assert (got.rdzv_port, got.sample_port) == (1, 65535)


def test_the_host_keeps_everything_before_the_last_colon() -> None:
    got = spec(rdzv_endpoint="[::1]:29500", run_secret=SECRET)
    assert got is not None
    assert (got.rdzv_host, got.rdzv_port) == ("[::1]", 29500)


@pytest.mark.parametrize(
    ("changes", "start"),
    [
        ({"nnodes": 0}, "--nnodes must be at least 1"),
        ({"nnodes": -2}, "--nnodes must be at least 1"),
        # multi-node options without --nnodes
        ({"nnodes": 1, "node_rank": 0, "rdzv_endpoint": None}, "--node-rank is for runs across nodes"),
        ({"nnodes": 1, "node_rank": None, "nproc_per_node": 4, "rdzv_endpoint": None}, "--nproc-per-node is for"),
        ({"nnodes": 1, "node_rank": None}, "--rdzv-endpoint is for runs across nodes"),
        ({"nnodes": 1, "node_rank": None, "rdzv_endpoint": None, "sample_port": 29501}, "--sample-port is for"),
        # node rank
        ({"node_rank": None}, "--node-rank: give this node's index, 0 to 1"),
        ({"node_rank": 2}, "--node-rank: give this node's index, 0 to 1"),
        ({"node_rank": -1}, "--node-rank: give this node's index, 0 to 1"),
        # endpoint
        ({"rdzv_endpoint": None}, "--rdzv-endpoint HOST:PORT is needed with --nnodes"),
        ({"rdzv_endpoint": "127.0.0.1"}, "--rdzv-endpoint: '127.0.0.1' is not HOST:PORT"),
        ({"rdzv_endpoint": ":29500"}, "--rdzv-endpoint: ':29500' is not HOST:PORT"),
        ({"rdzv_endpoint": "h:"}, "--rdzv-endpoint: 'h:' is not HOST:PORT"),
        ({"rdzv_endpoint": "h:port"}, "--rdzv-endpoint: 'h:port' is not HOST:PORT"),
        ({"rdzv_endpoint": "h:-1"}, "--rdzv-endpoint: 'h:-1' is not HOST:PORT"),
        ({"rdzv_endpoint": "h:0"}, "--rdzv-endpoint: 'h:0' is not HOST:PORT"),
        ({"rdzv_endpoint": "h:65536"}, "--rdzv-endpoint: 'h:65536' is not HOST:PORT"),
        # ranks per node
        ({"nproc_per_node": 3}, "--nproc-per-node 3 x --nnodes 2 must equal pp x tp = 4 ranks"),
        ({"nproc_per_node": 0}, "--nproc-per-node 0 x --nnodes 2 must equal pp x tp = 4 ranks"),
        ({"world_size": 5}, "--nproc-per-node 2 x --nnodes 2 must equal pp x tp = 5 ranks"),
        ({"world_size": 1}, "--nproc-per-node 0 x --nnodes 2 must equal pp x tp = 1 ranks"),
        # sample port
        ({"sample_port": 29500}, "--sample-port: 29500 must be a TCP port other than the rendezvous port"),
        ({"sample_port": 0}, "--sample-port: 0 must be a TCP port"),
        ({"sample_port": 65536}, "--sample-port: 65536 must be a TCP port"),
        ({"rdzv_endpoint": "h:65535"}, "--sample-port: 65536 must be a TCP port"),  # the default, one past
        # run id
        ({"rdzv_id": ""}, "--rdzv-id: ''; use a non-empty name without '/'"),
        ({"rdzv_id": "a/b"}, "--rdzv-id: 'a/b'; use a non-empty name without '/'"),
    ],
)
def test_bad_options_are_refused_in_one_line(changes: dict[str, Any], start: str) -> None:
    with pytest.raises(UsageError) as caught:
        spec(**changes)
    message = str(caught.value)
    assert message.startswith(start)
    assert "\n" not in message
    assert caught.value.exit_code == 2


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("localhost", True),
        ("10.0.0.1", False),
        ("192.168.1.20", False),
    ],
)
def test_loopback(host: str, loopback: bool) -> None:
    base = spec()
    assert base is not None
    assert dataclasses.replace(base, rdzv_host=host).loopback is loopback


def test_an_unresolvable_host_is_not_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    def unresolvable(name: str) -> str:
        raise socket.gaierror(-2, "Name or service not known")

    base = spec()
    assert base is not None
    monkeypatch.setattr(socket, "gethostbyname", unresolvable)
    assert dataclasses.replace(base, rdzv_host="node0.cluster").loopback is False


# --- the run secret ----------------------------------------------------------------------


def test_on_loopback_no_secret_is_needed() -> None:
    got = spec()
    assert got is not None
    assert got.run_secret is None  # node 0 makes one and leaves it for this user


def test_a_given_secret_is_kept_and_never_shown() -> None:
    got = spec(rdzv_endpoint="10.0.0.1:29500", run_secret=SECRET)
    assert got is not None
    assert got.run_secret == SECRET
    assert SECRET not in repr(got)


@pytest.mark.parametrize(
    ("changes", "start"),
    [
        ({"rdzv_endpoint": "10.0.0.1:29500"}, "--run-secret (or HICACHE_RUN_SECRET) is needed across machines"),
        ({"rdzv_endpoint": "10.0.0.1:29500", "run_secret": ""}, "--run-secret (or HICACHE_RUN_SECRET) is needed"),
        ({"run_secret": "short"}, "--run-secret (HICACHE_RUN_SECRET): at least 16 characters"),
    ],
)
def test_a_missing_or_weak_secret_is_refused(changes: dict[str, Any], start: str) -> None:
    with pytest.raises(UsageError) as caught:
        spec(**changes)
    assert str(caught.value).startswith(start)
    assert caught.value.exit_code == 2


def test_one_machine_ignores_a_secret_from_the_environment() -> None:
    assert node_spec(4, 1, None, None, None, "hicache", None, "short") is None
