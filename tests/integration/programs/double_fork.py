"""Leaves a daemon behind at once, as a server that daemonizes a helper does: a child forks
the daemon and exits; the daemon starts a session of its own, writes its pid to the file
named on the command line and sleeps. The program waits for the pid file, then exits, so
that nothing of it is left for a tracer to see but the orphan."""

import os
import sys
import time


def main(pid_file: str) -> None:
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            with open(pid_file + ".tmp", "w") as out:
                out.write(str(os.getpid()))
            os.rename(pid_file + ".tmp", pid_file)
            time.sleep(120)
            os._exit(0)
        os._exit(0)
    os.wait()
    deadline = time.monotonic() + 30
    while not os.path.exists(pid_file) and time.monotonic() < deadline:
        time.sleep(0.01)


if __name__ == "__main__":
    main(sys.argv[1])
