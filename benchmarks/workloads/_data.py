"""Where the benchmark workloads keep the files they make (shared by the configs here)."""

import os
import tempfile
from pathlib import Path


def data_root() -> Path:
    """Where the benchmark workloads keep their files: $AUTOTUNE_BENCH_DATA, or a
    per-user folder in the system's temporary directory."""
    explicit = os.environ.get("AUTOTUNE_BENCH_DATA")
    if explicit:
        return Path(explicit)
    return Path(tempfile.gettempdir()) / f"autotune-bench-{os.getuid()}"
