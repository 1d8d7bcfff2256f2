"""A launched server stops once the speclens process that launched it is gone, however and whenever
that process died (runners/parent_watch.py): here the launcher is killed with SIGKILL, which runs no
handler, at several moments: as soon as the server is started, before the server loads the plugin,
after it has; and the plugin alone (no kernel tie) ends a server whose launcher is already gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The 'server': in its own session as the runner starts one; it says it runs, waits for `go` (a
# file) before it loads the plugin, says it is ready, then waits.
SERVER = (
    "import pathlib, sys, time; from runners.parent_watch import register; "
    "ready, go = map(pathlib.Path, sys.argv[1:3]); (ready.parent / 'running').write_text('1')\n"
    "while not go.exists(): time.sleep(0.02)\n"
    "register(); ready.write_text('ready'); time.sleep(600)"
)
# The 'speclens' launching it (the runner's own launch, or a bare Popen without the kernel tie): the
# server's pid written out, then it waits, or kills itself at once (`now`).
LAUNCHER = (
    "import os, pathlib, signal, subprocess, sys, time\n"
    "from runners.parent_watch import PARENT_ENV, launch\n"
    "server, ready, go, pid_file, how, when = sys.argv[1:]\n"
    "command = [sys.executable, '-c', server, ready, go]\n"
    "if how == 'kernel': p = launch(command, dict(os.environ))\n"
    "else: p = subprocess.Popen(command, env={**os.environ, PARENT_ENV: str(os.getpid())}, start_new_session=True)\n"
    "pathlib.Path(pid_file).write_text(str(p.pid))\n"
    "if when == 'now': os.kill(os.getpid(), signal.SIGKILL)\n"
    "time.sleep(600)"
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


@pytest.mark.parametrize(
    "how, killed",
    [
        ("kernel", "at once"),  # the server may not have exec'd Python yet
        ("kernel", "before the plugin"),
        ("kernel", "after the plugin"),
        ("plugin only", "before the plugin"),  # the orphan case: the plugin finds its launcher gone
        ("plugin only", "after the plugin"),
    ],
)
def test_a_server_whose_launcher_is_killed_stops(tmp_path, how, killed):
    ready, go, pid_file, running = tmp_path / "ready", tmp_path / "go", tmp_path / "server.pid", tmp_path / "running"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    when = "now" if killed == "at once" else "later"
    args = [SERVER, str(ready), str(go), str(pid_file), "kernel" if how == "kernel" else "bare", when]
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, *args], env=env)
    try:
        assert wait_for(pid_file.exists, 60), "the launcher never started the server"
        server = int(pid_file.read_text())
        if killed == "after the plugin":
            go.write_text("1")
            assert wait_for(ready.exists, 60), "the server never loaded the plugin"
        elif killed == "before the plugin":
            assert wait_for(running.exists, 60), "the server never started"
        if when == "later":
            launcher.send_signal(signal.SIGKILL)
        launcher.wait()
        if killed == "before the plugin" and how == "plugin only":
            assert alive(server)  # nothing but the plugin can end it, and it has not loaded
            go.write_text("1")
        assert wait_for(lambda: not alive(server), 30), "the server outlived the process that launched it"
        assert not ready.exists() or killed == "after the plugin"
    finally:
        launcher.kill()
        if pid_file.exists() and alive(int(pid_file.read_text())):
            os.killpg(int(pid_file.read_text()), signal.SIGKILL)


def test_a_process_the_server_starts_itself_does_not_watch(monkeypatch):
    from runners import parent_watch

    started, ended = [], []
    monkeypatch.setattr(parent_watch.threading, "Thread", lambda **kw: started.append(kw) or _Idle())
    monkeypatch.setattr(parent_watch, "_end_group", lambda: ended.append(True))
    monkeypatch.setattr(parent_watch.os, "getsid", lambda pid: os.getpid() + 1)  # not a session leader
    monkeypatch.setenv(parent_watch.PARENT_ENV, str(os.getppid() + 1))  # another process's pid
    parent_watch.register()
    monkeypatch.delenv(parent_watch.PARENT_ENV)
    parent_watch.register()
    assert started == [] and ended == []
    monkeypatch.setenv(parent_watch.PARENT_ENV, str(os.getppid()))
    parent_watch.register()
    assert [kw["name"] for kw in started] == ["speclens-parent-watch"] and ended == []


class _Idle:
    def start(self) -> None:
        pass


# A build as evals/embedded/drafter_builds.py runs one: a child (the build) that starts a grandchild
# (its self-distillation's vLLM engine), each writing its pid, then waiting.
BUILD = (
    "import pathlib, subprocess, sys, time\n"
    "folder = pathlib.Path(sys.argv[1])\n"
    "grandchild = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
    "(folder / 'child.tmp').write_text(f'{__import__(\"os\").getpid()} {grandchild.pid}')\n"
    "(folder / 'child.tmp').rename(folder / 'child')\n"
    "time.sleep(600)"
)
BUILDER = (
    "import sys\nfrom runners.parent_watch import run_in_group\n"
    "try:\n    run_in_group([sys.executable, '-c', sys.argv[1], sys.argv[2]])\n"
    "except KeyboardInterrupt:\n    sys.exit(130)\n"
)


def _sigint_as_from_a_terminal() -> None:
    """The builder takes Ctrl-C as a user's shell would deliver it: in the full suite, a library an
    earlier test loaded into this worker left SIGINT blocked or ignored, which a child inherits, and
    the interrupt never arrived (the test failed there and passed alone)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _signal_masks(pid: int) -> str:
    status = Path(f"/proc/{pid}/status")
    lines = status.read_text().splitlines() if status.exists() else []
    return "; ".join(line for line in lines if line.startswith(("SigBlk", "SigIgn", "SigCgt", "State"))) or "gone"


def test_an_interrupt_during_a_build_ends_the_build_and_what_it_started(tmp_path):
    """issue 66: Ctrl-C during a first-use drafter build printed `speclens: interrupted` but left the
    self-distillation child and its vLLM engine running."""
    builder = subprocess.Popen(
        [sys.executable, "-c", BUILDER, BUILD, str(tmp_path)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        preexec_fn=_sigint_as_from_a_terminal,
    )
    try:
        assert wait_for(lambda: (tmp_path / "child").exists(), 60)
        child, grandchild = map(int, (tmp_path / "child").read_text().split())
        assert alive(child) and alive(grandchild)
        os.kill(builder.pid, signal.SIGINT)
        try:
            status = builder.wait(timeout=60)
        except subprocess.TimeoutExpired:
            status = None
        assert status == 130, _signal_masks(builder.pid)
        assert wait_for(lambda: not alive(child) and not alive(grandchild), 30)
    finally:
        builder.kill()
