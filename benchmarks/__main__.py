"""``python -m benchmarks``: run a suite (see ``benchmarks/README.md``)."""

import sys

from benchmarks._cli import main

sys.exit(main())
