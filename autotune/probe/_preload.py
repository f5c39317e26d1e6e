"""Which modules the fork server that probes start from may import ahead of them.

A probe is forked from that server, and a forked process cannot use CUDA once its
parent has initialised it, or merely asked the CUDA runtime how many devices there
are (``torch.cuda.is_available()`` does). A framework that does either at import
(transformers, Lightning, a library they pull in) would make every probe fail if
the server preloaded it, so each module is first imported in a throwaway process
that says whether CUDA was touched.
"""

from __future__ import annotations

import functools
import subprocess
import sys
import warnings

CHECK_TIMEOUT_S = 120.0
"""How long the throwaway import may take (a large framework imports in seconds)."""
_TOUCHED = 3
_CHECK = """
import importlib, os, sys
import torch
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except Exception:
        pass
if torch.cuda.is_initialized():
    sys.exit(3)
pid = os.fork()
if pid == 0:
    os._exit(3 if torch.cuda._is_in_bad_fork() else 0)
sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


def cuda_built() -> bool:
    """Whether this torch has CUDA at all (a CPU-only build has nothing to initialise)."""
    import torch

    return torch.version.cuda is not None


def _leaves_cuda_alone(modules: tuple[str, ...]) -> bool:
    """Whether importing ``modules`` in a fresh process leaves CUDA usable in its forked
    children; False also when the check itself fails (then nothing is preloaded, which
    costs probes start-up time, never a result)."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CHECK, *modules],
            capture_output=True,
            timeout=CHECK_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@functools.cache
def cuda_safe(modules: tuple[str, ...]) -> tuple[str, ...]:
    """Those of ``modules`` the fork server may preload: all of them with a CPU-only
    torch; with CUDA, those whose import leaves it alone (a warning names the others,
    which each probe then imports itself)."""
    if not modules or not cuda_built() or _leaves_cuda_alone(modules):
        return modules
    safe = tuple(m for m in modules if _leaves_cuda_alone((m,)))
    for name in (m for m in modules if m not in safe):
        warnings.warn(
            f"importing {name} touches CUDA, which a process forked after it cannot use: "
            "the fork server probes start from does not preload it, so each probe imports "
            "it itself (slower start-up, same figures)",
            RuntimeWarning,
            stacklevel=2,
        )
    return safe
