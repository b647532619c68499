"""One submission's sandbox: bubblewrap (``bwrap``) around the process that grades it.

Inside, the submission's kernel sees only what is bound in from an allow-list, read-only: the
system's programs and libraries (``/usr``, ``/etc``, ``/sys`` and the links into ``/usr``), Python,
and the package with its shipped data. Nothing else of the machine is there: no ``/home``, no
``/root``, no ``/run`` (the user's D-Bus and systemd sockets), no ``/var``, none of the instructor's
folders; the instructor's folders that lie inside a bound one (a class folder in a checkout) are
emptied. Its only writable places are three memory file systems of a fixed size each, which end
with it: its scratch folder (where its copy of the notebook is bound in read-only), ``/tmp`` and
``/dev/shm`` (its own root, ``/dev`` and every emptied folder are read-only). Filling one fills
that job's own; nothing it writes reaches the instructor's disk.
It has no network (a loopback of its own, for the kernel's sockets), no view of other processes
(a process-id namespace of its own), a bare environment, and limits on processes, memory and file
size. Every process it starts lives in its process-id namespace, so all of them end when the
grading process ends or is killed (``--die-with-parent``), double forks and new sessions
included.

Run as root, bwrap keeps root's rights over the file system, so the graded process is given a
user id of its own first (``setpriv``, no supplementary group): one per job, so that one job's
fork bomb, held at the process limit, cannot starve the other job's kernel. That user then starts
a second bwrap, a user namespace of the job's own in which no other can be made
(``NO_USER_NAMESPACES``). Run as another user,
bwrap's user namespace does that, the process limit counts that namespace's processes alone, and
no user namespace can be made inside it (``--disable-userns``). An ordinary user's supplementary
groups cannot be dropped without privileges (the kernel keeps granting their rights inside the
namespace), so every file or folder of the allow-list that one of those groups alone may read or
enter is covered (``group_only_files``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

SANDBOX_UID_BASE = 61000
"""When grading as root: job ``k`` runs as user id ``SANDBOX_UID_BASE + k`` (no account needed)."""


@dataclass(frozen=True)
class Limits:
    """What one submission may use (``prlimit``). Processes counts threads too (a kernel running
    torch has a few dozen)."""

    processes: int = 512  # the job's: per user id as root, per user namespace otherwise
    memory_gib: float = 8.0  # RLIMIT_DATA: heap and private mappings, not the mapped files
    file_gib: float = 1.0  # the largest file it may write
    disk_gib: float = 1.0  # the size of each of its memory file systems: scratch, /tmp, /dev/shm
    job_memory_gib: float = 8.0  # all its processes and memory file systems (cgroup or watchdog)

    @property
    def job_memory_bytes(self) -> int:
        return int(self.job_memory_gib * (1 << 30))


def missing_tools() -> list[str]:
    """The sandbox's tools not on PATH (``bwrap`` from the bubblewrap package, ``prlimit`` and
    ``setpriv`` from util-linux)."""
    tools = ["bwrap", "prlimit"] + (["setpriv"] if os.geteuid() == 0 else [])
    return [tool for tool in tools if shutil.which(tool) is None]


def job_uid(slot: int) -> int | None:
    """The user id job ``slot`` grades as: its own when grading as root, else the caller's."""
    return SANDBOX_UID_BASE + slot if os.geteuid() == 0 else None


SLOT_LOCKS = Path("/run/grpo-minimal-grading")
"""Where a grading run, as root, locks the job numbers it uses (``claim_slot``)."""
CLAIMED_UIDS: set[int] = set()
"""Every user id a job of this process has graded as (what the tests look for afterwards)."""


def uid_in_use(uid: int) -> bool:
    """Whether ``uid`` belongs to an account, or to a process running now (one left by a grading
    that crashed, say): a job never grades as a user id that is not free."""
    import pwd

    try:
        pwd.getpwuid(uid)
        return True
    except KeyError:
        pass
    for status in Path("/proc").glob("[0-9]*/status"):
        with contextlib.suppress(OSError):
            for line in status.read_text().splitlines():
                if line.startswith("Uid:"):
                    if str(uid) in line.split()[1:]:
                        return True
                    break
    return False


def claim_slot(taken: set[int] = frozenset()) -> tuple[int, object | None]:
    """A job number that no other grading on this machine uses now, and the open lock file that
    holds it (close it to free the number). As root a job's number is its user id, and the
    process limit counts per user: two gradings sharing a user id (two instructors, two tests)
    would share the limit, and one's fork bomb would starve the other. Not as root: the next
    number not in ``taken``, no lock."""
    if os.geteuid() != 0:
        return min(set(range(len(taken) + 1)) - set(taken)), None
    import fcntl

    SLOT_LOCKS.mkdir(mode=0o700, exist_ok=True)
    for slot in range(1000):
        if slot in taken or uid_in_use(SANDBOX_UID_BASE + slot):
            continue
        handle = open(SLOT_LOCKS / f"slot-{slot}.lock", "a")  # noqa: SIM115
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            continue
        CLAIMED_UIDS.add(SANDBOX_UID_BASE + slot)
        return slot, handle
    raise RuntimeError(f"every grading job number is in use ({SLOT_LOCKS})")


def _python_folders() -> list[Path]:
    """What the graded Python needs to read: its prefixes and the interpreter's real folder."""
    folders = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.exec_prefix)}
    folders.add(Path(os.path.realpath(sys.executable)).parent.parent)
    return sorted({f.resolve() for f in folders})


def readable_folders() -> list[Path]:
    """Folders bound back read-only: Python, the package and its shipped data."""
    import grpo_minimal
    from grpo_minimal.shipped import data_dir

    package = Path(grpo_minimal.__file__).resolve().parent
    return [*_python_folders(), package, data_dir().resolve()]


SYSTEM_FOLDERS = {
    Path(p)
    for p in (
        "/",
        "/usr",
        "/bin",
        "/sbin",
        "/lib",
        "/lib64",
        "/etc",
        "/dev",
        "/proc",
        "/sys",
        "/run",
        "/var",
        "/opt",
    )
}
"""Folders the system runs from: never emptied over what is bound in, even when the instructor
works in one."""


SYSTEM_BINDS = ("/usr", "/etc", "/sys")
"""Bound in read-only: programs, libraries, the system's settings and the CPU's description
(torch reads it). /etc holds no one's secrets that its modes do not already guard."""
SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
"""Links into /usr on merged-/usr systems (Debian 12, Ubuntu), folders on older ones."""


def system_binds() -> list[str]:
    """bwrap's arguments for the system's part of the allow-list, as this machine lays it out."""
    args = []
    for folder in SYSTEM_BINDS:
        if os.path.isdir(folder):
            args += ["--ro-bind", folder, folder]
    for path in SYSTEM_LINKS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    return args


def _within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _parents(path: Path, bound: list[Path], made: set[Path]) -> list[str]:
    """bwrap's arguments making the folders above ``path`` that the sandbox lacks, traversable
    by the graded user (bwrap would copy the originals' modes, and /root, /root/.pyenv or
    pytest's temporary root are 0700). ``bound`` are the folders already bound in (whatever is
    inside them is there already); ``path`` joins them."""
    args = []
    for parent in reversed(path.parents):
        if parent == Path("/") or parent in made or any(_within(parent, b) for b in bound):
            continue
        args += ["--perms", "0755", "--dir", str(parent)]
        made.add(parent)
    bound.append(path)
    return args


def _bind(path: Path, bound: list[Path], made: set[Path], flag: str) -> list[str]:
    """``flag path path``, after the folders above it that the sandbox lacks (``_parents``)."""
    return [*_parents(path, bound, made), flag, str(path), str(path)]


def group_only_files(roots: list[Path], groups: set[int]) -> list[Path]:
    """What below ``roots`` one of ``groups`` may read or enter and others may not
    (``/etc/shadow`` for the shadow group, the 0710 ``/etc/ssl/private`` for ssl-cert): the files
    and folders an ordinary user's supplementary groups would open inside the sandbox. A root
    itself is never one (what is bound in must stay there); symbolic links are not followed
    (what they name is bound or not on its own). Looked for once per grading run: 0.9 s for
    /usr's 140,530 entries on the course's 2-core machine."""
    return list(_group_only(tuple(Path(root) for root in roots), frozenset(groups)))


@functools.lru_cache(maxsize=8)
def _group_only(roots: tuple[Path, ...], groups: frozenset[int]) -> tuple[Path, ...]:
    """``group_only_files``, walked once for each set of roots and groups."""
    found: list[Path] = []
    pending: list[Path] = []
    for root in roots:
        with contextlib.suppress(OSError):
            pending.extend(root.iterdir())
    while pending:
        path = pending.pop()
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISLNK(info.st_mode):
            continue
        group_only = (info.st_mode >> 3) & ~info.st_mode & 0o5  # read or enter, others may not
        if group_only and info.st_gid in groups:
            found.append(path)  # covered whole: nothing below it needs looking at
            continue
        if stat.S_ISDIR(info.st_mode) and info.st_mode & stat.S_IXOTH:
            with contextlib.suppress(OSError):
                pending.extend(path.iterdir())
    return tuple(sorted(found))


def supplementary_groups() -> set[int]:
    """The groups an ordinary user's sandbox keeps: every group of the caller but its own."""
    return set(os.getgroups()) - {os.getgid()}


def command(
    argv: list[str],
    scratch: Path,
    hidden: list[Path],
    readable: list[Path],
    env: dict[str, str],
    slot: int,
    limits: Limits = Limits(),
    groups: set[int] | None = None,
) -> list[str]:
    """The command line that runs ``argv`` sandboxed: the system's allow-list and ``readable``
    files and folders bound in read-only; ``scratch`` a memory file system of its own with each
    file of the real ``scratch`` bound in read-only (nothing written there reaches the real one);
    any ``hidden`` folder (the instructor's) that lies inside a folder bound in emptied; and, for
    an ordinary user, whatever ``groups`` (the caller's supplementary groups by default) alone
    may read under the allow-list covered. Nothing else of the machine is there."""
    scratch = scratch.resolve()
    hidden = sorted({h.resolve() for h in hidden} - SYSTEM_FOLDERS, key=lambda p: len(p.parts))
    readable = sorted({r.resolve() for r in readable}, key=lambda p: len(p.parts))
    size = str(int(limits.disk_gib * (1 << 30)))
    args = ["bwrap", *system_binds(), "--dev", "/dev", "--proc", "/proc"]
    # everyone's, as a system's /tmp is; each of a fixed size, filled only by this job
    args += ["--size", size, "--perms", "1777", "--tmpfs", "/tmp"]
    args += ["--size", size, "--perms", "1777", "--tmpfs", "/dev/shm"]
    bound = [Path(p) for p in SYSTEM_BINDS]  # what is inside these is there already
    made = {Path("/tmp")}  # made above: the folders on the way to a path in it are made below
    for path in readable:
        if path.exists() and not any(_within(path, b) for b in bound):
            args += _bind(path, bound, made, "--ro-bind")
    # an instructor's folder inside a folder bound in is emptied
    covers = [
        folder
        for folder in hidden
        if folder.is_dir() and any(_within(folder, r) and folder != r for r in readable)
    ]
    for folder in covers:
        args += ["--tmpfs", str(folder)]
    args += [
        *_parents(scratch, bound, made),
        "--size",
        size,
        "--perms",
        "1777",
        "--tmpfs",
        str(scratch),
    ]
    for entry in sorted(scratch.iterdir()):  # what grading put there: read-only
        if entry.is_dir() and not entry.is_symlink() and not any(entry.iterdir()):
            args += ["--perms", "1777", "--dir", str(entry)]
        elif entry.is_file() and not entry.is_symlink():
            args += ["--ro-bind", str(entry), str(entry)]
        else:  # nothing grading makes: never dropped silently
            raise ValueError(f"{entry}: the scratch holds only files and empty folders")
    args += ["--chdir", str(scratch)]
    uid = job_uid(slot)
    if uid is None:  # an unprivileged bwrap: a user namespace of its own, and none inside it
        args += ["--unshare-all", "--unshare-user", "--disable-userns"]
        groups = supplementary_groups() if groups is None else set(groups)
        if groups:  # their rights cannot be dropped here: what they alone may open is covered
            roots = [Path(p) for p in ("/etc", "/usr")] + readable
            for path in group_only_files(roots, groups):
                if any(_within(path, folder) for folder in covers):
                    continue  # emptied already
                if path.is_dir():
                    args += ["--tmpfs", str(path)]
                    covers.append(path)
                else:
                    args += ["--ro-bind", "/dev/null", str(path)]
    else:  # root: every namespace but the user's, then a user id of the job's own (setpriv)
        args += [
            "--unshare-ipc",
            "--unshare-pid",
            "--unshare-net",
            "--unshare-uts",
            "--unshare-cgroup-try",
        ]
    # read-only: the sandbox's own root and /dev, and every emptied folder (memory file systems
    # of half the machine's memory each); only the scratch, /tmp and /dev/shm stay writable
    for place in ["/", "/dev", *map(str, covers)]:
        args += ["--remount-ro", place]
    args += ["--die-with-parent", "--new-session", "--clearenv"]
    for key, value in sorted(env.items()):
        args += ["--setenv", key, value]
    args.append("--")
    if uid is not None:
        args += [
            "setpriv",
            f"--reuid={uid}",
            f"--regid={uid}",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
        ]
        if jobs_can_make_user_namespaces():
            args += NO_USER_NAMESPACES
    gib = 1 << 30
    args += [
        "prlimit",
        f"--nproc={limits.processes}",
        f"--data={int(limits.memory_gib * gib)}",
        f"--fsize={int(limits.file_gib * gib)}",
        "--core=0",
        "--",
    ]
    return args + argv


NO_USER_NAMESPACES = (
    "bwrap --dev-bind / / --unshare-user --disable-userns --die-with-parent --"
).split()
"""As root, run by the job's user inside the sandbox: a user namespace of the job's own (the same
mounts, its user id mapped to itself) in which no other can be made. Without it the job's user
could make one (``unshare -Urm``), become root there and unmount what covers the instructor's
folders. Its processes stay in the sandbox's process-id namespace."""


@functools.lru_cache(maxsize=1)
def jobs_can_make_user_namespaces() -> bool:
    """Whether a job's user id could make a user namespace here, where grading as root must refuse
    it (``NO_USER_NAMESPACES``); where it cannot (``user.max_user_namespaces=0``, Debian's old
    ``unprivileged_userns_clone=0``), there is nothing to refuse, and bwrap could not do it."""
    import subprocess

    uid = SANDBOX_UID_BASE
    job = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
    probe = [*job, "unshare", "--user", "--map-root-user", "--mount", "true"]
    done = subprocess.run(probe, capture_output=True)
    return done.returncode == 0


def probe() -> str | None:
    """None when a sandbox starts here; else why not, in one line (bwrap's own words: user
    namespaces turned off, say)."""
    import subprocess
    import tempfile

    slot, lock = claim_slot()
    with tempfile.TemporaryDirectory(prefix="lab-probe-") as scratch:
        if (uid := job_uid(slot)) is not None:
            os.chown(scratch, uid, uid)
        argv = command(["true"], Path(scratch), [], [], {"PATH": "/usr/bin:/bin"}, slot)
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"{type(error).__name__}: {error}"
        finally:
            if lock is not None:
                lock.close()
    if done.returncode == 0:
        return None
    lines = (done.stderr or done.stdout).strip().splitlines()
    return lines[-1] if lines else f"exit status {done.returncode}"
