"""The team's communication helpers: a decorator that logs slow calls, and the handful of
torch.distributed calls the services use, wrapped in it."""

import functools
import time

import torch.distributed as dist

SLOW_S = 0.5


def logged(fn):
    """Log a call that takes longer than SLOW_S."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        began = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            took = time.perf_counter() - began
            if took > SLOW_S:
                print(f"slow {fn.__name__}: {took:.2f} s", flush=True)

    return wrapper


isend = logged(dist.isend)
all_gather_into_tensor = logged(dist.all_gather_into_tensor)
