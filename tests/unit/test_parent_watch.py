"""A launched server stops once the speclens process that launched it is gone, however that process
died (runners/parent_watch.py): here the launcher is killed with SIGKILL, which runs no handler."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The 'server': in its own session as ServerProcess starts one, the plugin registered, then waiting.
SERVER = (
    "import pathlib, sys, time; from runners.parent_watch import register; register(); "
    "pathlib.Path(sys.argv[1]).write_text('ready'); time.sleep(600)"
)
# The 'speclens' launching it: its pid in the server's environment, the server's pid written out.
LAUNCHER = (
    "import os, pathlib, subprocess, sys, time; from runners.parent_watch import PARENT_ENV; "
    "env = {**os.environ, PARENT_ENV: str(os.getpid())}; "
    "p = subprocess.Popen([sys.executable, '-c', sys.argv[1], sys.argv[2]], env=env, start_new_session=True); "
    "pathlib.Path(sys.argv[3]).write_text(str(p.pid)); time.sleep(600)"
)


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def wait_for(condition, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def test_a_server_whose_launcher_is_killed_stops(tmp_path):
    ready, pid_file = tmp_path / "ready", tmp_path / "server.pid"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, SERVER, str(ready), str(pid_file)], env=env)
    try:
        assert wait_for(lambda: ready.exists() and pid_file.exists(), 60), "the server never started"
        server = int(pid_file.read_text())
        assert alive(server)
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        assert wait_for(lambda: not alive(server), 30), "the server outlived the process that launched it"
    finally:
        launcher.kill()
        if pid_file.exists() and alive(int(pid_file.read_text())):
            os.killpg(int(pid_file.read_text()), signal.SIGKILL)


def test_a_process_the_server_starts_itself_does_not_watch(monkeypatch):
    from runners import parent_watch

    started = []
    monkeypatch.setattr(parent_watch.threading, "Thread", lambda **kw: started.append(kw) or _Idle())
    monkeypatch.setenv(parent_watch.PARENT_ENV, str(os.getppid() + 1))  # another process's pid
    parent_watch.register()
    monkeypatch.delenv(parent_watch.PARENT_ENV)
    parent_watch.register()
    assert started == []
    monkeypatch.setenv(parent_watch.PARENT_ENV, str(os.getppid()))
    parent_watch.register()
    assert [kw["name"] for kw in started] == ["speclens-parent-watch"]


class _Idle:
    def start(self) -> None:
        pass
