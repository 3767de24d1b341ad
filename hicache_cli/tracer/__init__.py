"""`hicache trace`, the part that runs inside the traced program.

Everything here is imported into someone else's Python process, next to its own packages:
it uses the standard library and the program's own torch, nothing else (a layering test
holds that), and it does nothing at all in a process that never starts a process group.

- `boot/sitecustomize.py`: put first on PYTHONPATH; arms the hooks, then runs the
  program's own sitecustomize.
- `protocol.py`: the environment and file names both sides of a trace agree on.
- `works.py`: every Work torch.distributed hands out, counted by creation site.
- `messages.py`: every point-to-point message, counted per peer and group.
- `hazards.py`: sends never waited at the end, the blocking call a process is stuck in.
- `session.py`: one observed process: its rank file, its probe, how it ends.
- `hooks.py`: what runs when torch.distributed (or the `--loop` module) is imported.
"""
