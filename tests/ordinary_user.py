"""Running a command as a real ordinary user (nobody) from a test run as root, as an instructor
who is not root runs ``lab grade``.

The instructor's folders are often private: this checkout's Python lives under ``/root/.pyenv``
(``/root`` is 0700), and a checkout or a pytest folder may sit in a ``mktemp -d`` folder (0700).
Nobody could not even start that Python. So, in a mount namespace of its own (``unshare``, as
root), the command sees the whole system as it is, except that the highest private folder on
the way to a path it needs is an empty one holding just that path, bound read-only, and open
folders on the way to it. Nothing else of that folder is there, and nothing is opened on the
real system: no permission is changed, so a test that stops half-way leaves nothing open.
``setpriv`` then drops every right of root before the command starts; it makes its own
sandboxes with bwrap as any ordinary user does (a user namespace).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from grpo_minimal.instructor.sandbox import readable_folders

NOBODY = 65534
ORDINARY_GID = 4242  # a supplementary group of the ordinary user, and no one else's


def can_run_as_nobody() -> str:
    """Why a test cannot run a command as nobody here, or "" when it can: root, the tools, and a
    bwrap sandbox that nobody may build (Debian's ``unprivileged_userns_clone=0`` refuses the
    user namespace; Ubuntu's AppArmor lets it be made but not given the uid map)."""
    if os.geteuid() != 0:
        return "needs root (to become nobody)"
    if missing := [tool for tool in ("setpriv", "unshare", "bwrap") if not shutil.which(tool)]:
        return f"needs {', '.join(missing)}"
    done = subprocess.run(
        [
            "setpriv",
            f"--reuid={NOBODY}",
            f"--regid={NOBODY}",
            "--clear-groups",
            "bwrap",
            "--unshare-user",
            "--ro-bind",
            "/",
            "/",
            "true",
        ],
        capture_output=True,
        text=True,
    )
    return "" if done.returncode == 0 else f"nobody cannot build a sandbox: {done.stderr.strip()}"


def _top_private_folder(path: Path) -> Path | None:
    """The highest folder on the way to ``path`` that others may not enter, if any; ``path``
    itself must be open (a private one would need its entries bound one by one)."""
    if path.is_dir() and not path.stat().st_mode & 0o001:
        raise ValueError(
            f"{path} is private (mode {path.stat().st_mode & 0o777:o}): nobody "
            "cannot enter it even when it is bound back"
        )
    for folder in reversed(path.parents):  # from / down
        if folder != folder.parent and not folder.stat().st_mode & 0o001:
            return folder
    return None


def reachable(paths: list[Path], stage: Path) -> str:
    """A shell script (run as root in a mount namespace of its own) that leaves the system as it
    is but lets others reach each of ``paths``: the highest private folder above one is covered
    by an empty one, the folders on the way are made open, and the path is bound back, its top
    mount read-only (from ``stage``, where it was bound first: once covered, it cannot be
    named)."""
    covers: list[Path] = []
    bound: list[Path] = []
    for path in sorted({Path(p).resolve() for p in paths}, key=lambda p: len(p.parts)):
        top = _top_private_folder(path)
        if top is None or any(path.is_relative_to(b) for b in bound):
            continue  # open all the way, or inside a path already bound back
        if top not in covers:
            covers.append(top)
        bound.append(path)
    if any(stage.is_relative_to(top) for top in covers):
        raise ValueError(f"{stage}: the staging folder lies in a folder the script covers")
    q = shlex.quote
    lines = ["set -e", "umask 022"]  # the folders made on the way: open
    for i, path in enumerate(bound):
        lines += [f"mkdir {q(f'{stage}/{i}')}", f"mount --rbind {q(str(path))} {q(f'{stage}/{i}')}"]
    lines += [f"mount -t tmpfs -o mode=755 cover {q(str(top))}" for top in covers]
    for i, path in enumerate(bound):
        lines += [
            f"mkdir -p {q(str(path))}",
            f"mount --rbind {q(f'{stage}/{i}')} {q(str(path))}",
            f"mount -o remount,bind,ro {q(str(path))}",
        ]
    return "\n".join(lines)


def python_paths() -> list[Path]:
    """What this Python needs to run the package: its base installation, the venv, the package
    and its data (an editable install's checkout is reached through a finder, not sys.path)."""
    return [Path(sys.base_prefix), Path(sys.prefix), *readable_folders()]


def as_nobody(
    argv: list[str],
    env: dict[str, str],
    needs: list[Path],
    groups: tuple[int, ...] = (),
    timeout: float = 900,
) -> subprocess.CompletedProcess:
    """``argv`` run as nobody (supplementary ``groups``, none by default), with ``env`` only,
    able to reach ``needs`` and this Python. ``unshare``, not bwrap, makes the mount namespace:
    bwrap would set no_new_privs, which an instructor's shell does not have."""
    who = [f"--reuid={NOBODY}", f"--regid={NOBODY}"]
    who += [f"--groups={','.join(map(str, groups))}"] if groups else ["--clear-groups"]
    with tempfile.TemporaryDirectory(prefix="nobody-stage-", dir="/tmp") as stage:
        script = reachable([*python_paths(), *needs], Path(stage))
        script += "\nexec setpriv " + " ".join(map(shlex.quote, [*who, "--", *argv]))
        return subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
