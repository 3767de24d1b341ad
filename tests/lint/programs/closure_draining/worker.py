"""The worker installs the hook once and pushes every buffer through it."""

import torch

from .patch import install

HOOKS: dict[str, object] = {}


def setup(dst: int) -> None:
    install(HOOKS, dst)


def push(buffer: torch.Tensor) -> None:
    HOOKS["send"](buffer)
