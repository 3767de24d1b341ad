"""Stands in for a hicache that attaches and then dies without detaching (SIGKILL, the OOM
killer): attach to PID, say so on stdout, and sleep until killed."""

import json
import sys
import time
from pathlib import Path

from hicache_cli.attach.session import AttachSession

session = AttachSession([int(sys.argv[1])], Path(sys.argv[2]))
attached = session.start()
print(json.dumps([t.pid for t in attached]), flush=True)
time.sleep(3600)
