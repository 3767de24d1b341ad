import sys

from hicache_cli.main import main

sys.exit(main())
