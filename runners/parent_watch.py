"""A launched server's guard: it stops when the speclens process that launched it is gone.

speclens stops its servers on stop(), at exit and on SIGTERM or SIGINT, but a process killed by
SIGKILL or a fatal signal (SIGILL, SIGSEGV) runs none of that, and its server would keep its
memory and port. vLLM loads this plugin in every process it starts; it acts only in the process
speclens launched (whose parent is the pid in SPECLENS_SERVER_PARENT), and ends that process's
group once the parent is gone."""

from __future__ import annotations

import os
import signal
import threading
import time

PARENT_ENV = "SPECLENS_SERVER_PARENT"
POLL_S = 1.0


def register() -> None:
    """vLLM's general-plugin hook (and callable as is): start watching where this is the server."""
    parent = os.environ.get(PARENT_ENV, "")
    if not parent.isdigit() or os.getppid() != int(parent):
        return  # not a server speclens launched, or one of the server's own children
    threading.Thread(target=_watch, args=(int(parent),), daemon=True, name="speclens-parent-watch").start()


def _watch(parent: int) -> None:
    while os.getppid() == parent:  # an orphan is adopted by another process
        time.sleep(POLL_S)
    os.killpg(os.getpgid(0), signal.SIGTERM)
