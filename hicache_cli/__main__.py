import sys

from hicache_cli.cli.main import main

sys.exit(main())
