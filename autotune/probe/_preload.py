"""Which modules the fork server that probes start from may import ahead of them.

A probe is forked from that server, and a forked process cannot use CUDA once its
parent has initialised it, or merely asked the CUDA runtime how many devices there
are (``torch.cuda.is_available()`` does). A framework that does either at import
(transformers, Lightning, a library they pull in) would make every probe fail if
the server preloaded it, so each module is first imported in a fork of a throwaway
process that says whether CUDA was touched.
"""

from __future__ import annotations

import functools
import subprocess
import sys
import warnings

CHECK_TIMEOUT_S = 120.0
"""How long the throwaway check may take (a large framework imports in seconds)."""
# One interpreter imports torch once (the seconds of the check) and tries each module in
# a fork of its own, so one module's import says nothing of another's; it prints the
# names of those that touched CUDA, a line each.
_CHECK = """
import importlib, os, sys
import torch

def touches_cuda(name):
    try:
        importlib.import_module(name)
    except Exception:
        pass
    if torch.cuda.is_initialized():
        return True
    pid = os.fork()
    if pid == 0:
        os._exit(3 if torch.cuda._is_in_bad_fork() else 0)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0

for name in sys.argv[1:]:
    pid = os.fork()
    if pid == 0:
        os._exit(3 if touches_cuda(name) else 0)
    if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0:
        print(name, flush=True)
"""


def cuda_built() -> bool:
    """Whether this torch has CUDA at all (a CPU-only build has nothing to initialise)."""
    import torch

    return torch.version.cuda is not None


def _touching_cuda(modules: tuple[str, ...]) -> tuple[set[str], str]:
    """Those of ``modules`` whose import, in a fresh process, initialises CUDA or leaves
    its forked children unable to use it; all of them when the check itself fails (then
    nothing is preloaded, which costs probes start-up time, never a result), with why."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CHECK, *modules],
            capture_output=True,
            text=True,
            timeout=CHECK_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return set(modules), str(error)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return set(modules), last
    return set(done.stdout.split()) & set(modules), ""


@functools.cache
def cuda_safe(modules: tuple[str, ...]) -> tuple[str, ...]:
    """Those of ``modules`` the fork server may preload: all of them with a CPU-only
    torch; with CUDA, those whose import leaves it alone (a warning names the others,
    which each probe then imports itself)."""
    if not modules or not cuda_built():
        return modules
    touching, failure = _touching_cuda(modules)
    for name in (m for m in modules if m in touching):
        cause = (
            f"could not check whether importing {name} touches CUDA ({failure})"
            if failure
            else f"importing {name} touches CUDA, which a process forked after it cannot use"
        )
        warnings.warn(
            f"{cause}: the fork server probes start from does not preload it, so each "
            "probe imports it itself (slower start-up, same figures)",
            RuntimeWarning,
            stacklevel=2,
        )
    return tuple(m for m in modules if m not in touching)
