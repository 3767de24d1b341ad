"""The pytest plugin's machinery: `@pytest.mark.hicache_ranks` runs a test body on real ranks.

Where each part runs:
- `spec.py`: the marker's arguments, checked (pure; in pytest).
- `protocol.py`: the files pytest and the ranks agree on in a test's run directory (stdlib).
- `runner.py`: the rank process: a process group, the Work tracer, the test body (torch).
- `forkserver.py`: one process per session that imported torch once; forks the ranks, reaps them.
- `launch.py`: in pytest: start the ranks, watch them, stop every one of them (psutil).
- `results.py`: the typed per-rank results and the failure message, from the run directory (pure).
- `parent.py`: in pytest: one marked test end to end (the plugin's hook calls only this).

`hicache_cli.pytest_plugin` (loaded by pytest in every session) imports none of these until
a marked test runs, and nothing here but `runner.py` and `forkserver.py` imports torch.
"""
