"""Running a command as a real ordinary user (nobody) from a test run as root, as an instructor
who is not root runs ``lab grade``.

The instructor's folders are often private: this checkout's Python lives under ``/root/.pyenv``
(``/root`` is 0700), and a checkout or a pytest folder may sit in a ``mktemp -d`` folder (0700).
Nobody could not even start that Python. So, in a mount namespace of its own (``unshare``, as
root), the command sees the whole system as it is, except that each private folder on the way to
a path it needs is an empty one holding just that path, bound read-only. Nothing else of those
folders is there, and nothing is opened on the real system: no permission is changed, so a test
that stops half-way leaves nothing open. ``setpriv`` then drops every right of root before the
command starts; it makes its own sandboxes with bwrap as any ordinary user does (a user
namespace).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

NOBODY = 65534
ORDINARY_GID = 4242  # a supplementary group of the ordinary user, and no one else's


def can_run_as_nobody() -> str:
    """Why a test cannot run a command as nobody here, or "" when it can."""
    if os.geteuid() != 0:
        return "needs root (to become nobody)"
    missing = [tool for tool in ("setpriv", "unshare", "bwrap") if not shutil.which(tool)]
    return f"needs {', '.join(missing)}" if missing else ""


def _top_private_folder(path: Path) -> Path | None:
    """The highest folder on the way to ``path`` that others may not enter, if any."""
    for folder in reversed(path.parents):  # from / down
        if folder != folder.parent and not folder.stat().st_mode & 0o001:
            return folder
    return None


def reachable(paths: list[Path], stage: Path) -> str:
    """A shell script (run as root in a mount namespace of its own) that leaves the system as it
    is but lets others reach each of ``paths``: every private folder above one is covered by an
    empty one, the folders on the way are made open, and the path is bound back read-only (from
    ``stage``, where it was bound first: once covered, it cannot be named)."""
    covers: list[Path] = []
    bound: list[Path] = []
    for path in sorted({Path(p).resolve() for p in paths}, key=lambda p: len(p.parts)):
        top = _top_private_folder(path)
        if top is None or any(path.is_relative_to(b) for b in bound):
            continue  # open all the way, or inside a path already bound back
        if top not in covers:
            covers.append(top)
        bound.append(path)
    lines = ["set -e"]
    for i, path in enumerate(bound):
        lines += [f"mkdir {stage}/{i}", f"mount --bind {shlex.quote(str(path))} {stage}/{i}"]
    lines += [f"mount -t tmpfs -o mode=755 cover {shlex.quote(str(top))}" for top in covers]
    for i, path in enumerate(bound):
        where = shlex.quote(str(path))
        lines += [f"mkdir -p -m 755 {where}", f"mount --bind {stage}/{i} {where}",
                  f"mount -o remount,bind,ro {where}"]  # fmt: skip
    return "\n".join(lines)


def python_paths() -> list[Path]:
    """What this Python needs to start with its packages: its base installation, the venv, and
    every folder on ``sys.path`` (an editable install's checkout among them)."""
    paths = [Path(sys.base_prefix), Path(sys.prefix)]
    paths += [Path(p) for p in sys.path if p and Path(p).is_dir()]
    return paths


def as_nobody(argv: list[str], env: dict[str, str], needs: list[Path], groups: tuple[int, ...] = (),
              timeout: float = 600) -> subprocess.CompletedProcess:  # fmt: skip
    """``argv`` run as nobody (supplementary ``groups``, none by default), with ``env`` only,
    able to reach ``needs`` and this Python. ``unshare``, not bwrap, makes the mount namespace:
    bwrap would set no_new_privs, which an instructor's shell does not have and which changes
    what the sandboxes inside allow (a kernel can open its sandbox's init's stdout without it,
    not with it)."""
    who = [f"--reuid={NOBODY}", f"--regid={NOBODY}"]
    who += [f"--groups={','.join(map(str, groups))}"] if groups else ["--clear-groups"]
    with tempfile.TemporaryDirectory(prefix="nobody-stage-") as stage:
        script = reachable([*python_paths(), *needs], Path(stage))
        script += "\nexec setpriv " + " ".join(map(shlex.quote, [*who, "--", *argv]))
        return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                               script], env=env, capture_output=True, text=True,
                              timeout=timeout)  # fmt: skip
