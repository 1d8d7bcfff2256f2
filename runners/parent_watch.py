"""A launched server's (or build's) lifetime, tied to the speclens process that launched it.

speclens stops its servers on stop(), at exit and on SIGTERM or SIGINT, but a process killed by
SIGKILL or a fatal signal (SIGILL, SIGSEGV) runs none of that, and its server would keep its
memory and port. Two lines of defence:

1. the kernel: `launch` starts the server with PR_SET_PDEATHSIG, so it gets SIGTERM the moment
   its launcher dies, whenever that is (a launcher already gone by then makes it exit at once);
2. this vLLM plugin, loaded in every process vLLM starts: it acts only in the process speclens
   launched (the leader of its own session, SPECLENS_SERVER_PARENT in its environment) and ends
   that process's group once the launcher is gone, or at once where it is gone already.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import threading
import time

PARENT_ENV = "SPECLENS_SERVER_PARENT"
POLL_S = 1.0
_PR_SET_PDEATHSIG = 1


def launch(command: list[str], env: dict[str, str], **popen) -> subprocess.Popen:
    """Popen `command` in a session of its own, tied to this process: SIGTERM from the kernel when
    this process's launching thread ends (so call it from the thread that lives as long as the
    server should: the run's own), and SPECLENS_SERVER_PARENT for the plugin."""
    parent = os.getpid()
    libc = ctypes.CDLL(None, use_errno=True)  # loaded here: the child between fork and exec imports nothing

    def tie_to_parent() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # died before the request took effect: no signal will come
            os._exit(1)

    return subprocess.Popen(
        command, env={**env, PARENT_ENV: str(parent)}, start_new_session=True, preexec_fn=tie_to_parent, **popen
    )


def register() -> None:
    """vLLM's general-plugin hook (and callable as is): watch the launcher where this is the server."""
    parent = os.environ.get(PARENT_ENV, "")
    if not parent.isdigit():
        return  # not a server speclens launched
    if os.getppid() == int(parent):
        threading.Thread(target=_watch, args=(int(parent),), daemon=True, name="speclens-parent-watch").start()
    elif os.getpid() == os.getsid(0):
        # The launched server itself (launch makes it a session leader), adopted already: its launcher is gone.
        _end_group()
    # else: one of the server's own children; the server watches for them


def _watch(parent: int) -> None:
    while os.getppid() == parent:  # an orphan is adopted by another process
        time.sleep(POLL_S)
    _end_group()


def _end_group() -> None:
    os.killpg(os.getpgid(0), signal.SIGTERM)


def run_in_group(command: list[str], grace_s: float = 10.0, **popen) -> int:
    """Run `command` to its end in a process group of its own, tied to this process (launch), and
    its exit status; if this process is interrupted meanwhile (Ctrl-C, an error), end the whole
    group, children and grandchildren (a build's vLLM engine) alike, before the interrupt goes on:
    SIGTERM, then SIGKILL after `grace_s`."""
    proc = launch(command, dict(os.environ), **popen)
    try:
        return proc.wait()
    except BaseException:
        stop_group(proc, grace_s)
        raise


def stop_group(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """End the process group `proc` leads (launch made it a session leader): SIGTERM, SIGKILL
    after `grace_s`, and wait for `proc`."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait_s)
            break
        except subprocess.TimeoutExpired:
            continue
