"""`python -m dblog.cli`: the `dblog` command."""
import sys

from . import main

sys.exit(main())
