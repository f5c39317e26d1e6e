"""Imported only by the fork server that probes start from (it is in its preload list).

The search's multiprocessing temp directory (``pymp-*``) holds the fork
server's socket, and the sockets that probes and their DataLoader workers open
there (they inherit the directory). The search removes it when it exits; when
it is killed (SIGKILL, a job scheduler) nothing in it runs. The fork server
outlives it until the last probe and worker are gone, and then removes the
directory on its own way out.
"""

from __future__ import annotations

import atexit
import os
import shutil
from multiprocessing import forkserver, util


def _remove_temp_dir() -> None:
    server = getattr(forkserver, "_forkserver", None)
    address = getattr(server, "_forkserver_address", None)
    if not isinstance(address, str) or util.is_abstract_socket_namespace(address):
        return
    directory = os.path.dirname(address)
    if os.path.basename(directory).startswith("pymp-"):
        shutil.rmtree(directory, ignore_errors=True)


atexit.register(_remove_temp_dir)
