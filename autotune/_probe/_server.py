"""Imported only by the fork server that probes start from (it is in its preload list).

The fork server listens on a socket file in the search's temp directory. The
search removes that directory when it exits; when it is killed (SIGKILL, the
machine's job scheduler) nothing in it runs, so the fork server, which outlives
it until its last probe is gone, removes the socket on its own way out.
"""

from __future__ import annotations

import atexit
import contextlib
import os
from multiprocessing import forkserver, util


def _remove_socket() -> None:
    server = getattr(forkserver, "_forkserver", None)
    address = getattr(server, "_forkserver_address", None)
    if not isinstance(address, str) or util.is_abstract_socket_namespace(address):
        return
    with contextlib.suppress(OSError):
        os.unlink(address)
    with contextlib.suppress(OSError):
        os.rmdir(os.path.dirname(address))  # multiprocessing's pymp-* directory, once empty


atexit.register(_remove_socket)
