"""``python -m benchmarks``: run the suite (see ``benchmarks/README.md``)."""

import sys

from benchmarks._cli import main

sys.exit(main())
