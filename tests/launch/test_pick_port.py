"""The rendezvous port hicache picks when none is given."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from hicache_cli.launch import launcher
from hicache_cli.launch.launcher import pick_port

RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


@pytest.mark.skipif(not RANGE.exists(), reason="needs Linux's ephemeral port range")
def test_a_free_port_is_below_the_ephemeral_range() -> None:
    """An ephemeral port (bind to 0) may be handed to any outgoing connection before torchrun
    listens on it (EADDRINUSE under three test workers running gloo); ours never is."""
    low = int(RANGE.read_text().split()[0])
    ports = {pick_port("127.0.0.1", None) for _ in range(5)}
    assert all(10000 <= p < low for p in ports)
    for port in ports:  # and each is one the store can listen on
        with socket.socket() as sock:
            sock.bind(("0.0.0.0", port))


def test_without_the_range_it_asks_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launcher, "_below_ephemeral_ports", lambda: [])
    assert 1 <= pick_port("127.0.0.1", None) <= 65535


def test_a_busy_candidate_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        with socket.socket() as free_sock:
            free_sock.bind(("0.0.0.0", 0))
            free = free_sock.getsockname()[1]
        monkeypatch.setattr(launcher, "_below_ephemeral_ports", lambda: [taken, free])
        assert pick_port("127.0.0.1", None) == free
