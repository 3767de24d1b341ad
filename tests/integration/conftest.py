"""Real runs of the real CLI: torchrun, gloo ranks, psutil. Shared per session to save time."""

from __future__ import annotations

import pytest

from tests.integration.helpers import Run, stress_run


@pytest.fixture(scope="session")
def reap_pp2(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return stress_run(tmp_path_factory.mktemp("reap"), "--pp", "2", "--policy", "reap", "--duration", "8s")


@pytest.fixture(scope="session")
def drain_pp2(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return stress_run(tmp_path_factory.mktemp("drain"), "--pp", "2", "--policy", "drain", "--duration", "8s")
