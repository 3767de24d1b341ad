"""Run as a second local user (tests/second_user.py): what that user may try against root's
`hicache attach`, in a loop until a deadline. Stdlib only.

    attacker.py MODE DIR SECONDS ROOTS NAME [NAME...]

MODE `link` puts, under each NAME in DIR, a symlink to `ROOTS/sentinel` (a file of root's
that must not change) or to `ROOTS/created` (a file of root's that must never appear);
MODE `fifo` puts a FIFO there. Each is made under a fresh name and renamed over
NAME again and again, so whatever is at NAME when hicache looks is as likely to be the
attacker's as the agent's. It waits for DIR to appear. Prints, at the end, one JSON line:
how many times each name was planted and how many times the directory refused it."""

import json
import os
import sys
import time

mode, directory, seconds, roots, names = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4], sys.argv[5:]
deadline = time.monotonic() + seconds
planted = {name: 0 for name in names}
refused = {name: 0 for name in names}
while not os.path.isdir(directory) and time.monotonic() < deadline:
    time.sleep(0.005)
serial = 0
while time.monotonic() < deadline:
    for name in names:
        serial += 1
        tmp = os.path.join(directory, f".planted-{os.getpid()}-{serial}")
        try:
            if mode == "link":
                os.symlink(os.path.join(roots, "sentinel" if serial % 2 else "created"), tmp)
            else:
                os.mkfifo(tmp)
            os.replace(tmp, os.path.join(directory, name))
            planted[name] += 1
        except PermissionError:
            refused[name] += 1
        except OSError:
            pass
    time.sleep(0.002)
print(json.dumps({"planted": planted, "refused": refused}), flush=True)
