"""Limits per job, not per process: one control group (cgroup) around every process of a graded
submission.

``prlimit`` bounds each process alone: a submission's processes together can hold more memory
than any one may (a shared anonymous mapping is not even counted as a process's data), and 400
busy processes take 400 shares of the CPU against a classmate's one. A cgroup counts them
together: ``memory`` (its processes' memory, the pages of its memory file systems and its shared
memory; past the limit the kernel kills inside the job, never a classmate or the grader),
``pids`` (its processes and threads) and ``cpu`` (each job one equal share, however many
processes it runs).

Built here for cgroup v1 as root (``/sys/fs/cgroup/<controller>/...``, under the grader's own
group), the layout this course's machines have (their v2 hierarchy mounts, but with none of
these controllers: no v2 code is built, untested). Not as root, or under cgroup v2,
``available`` says why not, and the watchdog (``watchdog.py``) bounds each job instead;
``classroom.job_bound`` is the one line grading says before it starts.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import time
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("memory", "pids", "cpu")


def _own_group(controller: str) -> Path | None:
    """This process's group of a v1 ``controller`` (``/proc/self/cgroup``), or None."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, names, path = line.split(":", 2)
            if controller in names.split(","):
                return CGROUP_ROOT / controller / path.lstrip("/")
    return None


def available() -> str | None:
    """None when a job's cgroup can be made here; else why not, in a few words."""
    if os.geteuid() != 0:
        return "not root"
    for controller in CONTROLLERS:
        group = _own_group(controller)
        if group is None or not (group / "cgroup.procs").is_file():
            return f"no cgroup v1 {controller} controller"
        if not os.access(group, os.W_OK):
            return f"its {controller} cgroup is not writable"
    return None


GROUP_PREFIX = "grpo-grading-"
"""How a grading job's cgroup is named (then the grading process's id and the job's number)."""


def left_behind(grader: int | None = None) -> list[Path]:
    """Grading jobs' cgroups that still exist under this process's groups (none should); with
    ``grader``, only those of the grading process of that pid (another grading may be running)."""
    groups = [_own_group(controller) for controller in CONTROLLERS]
    pattern = f"{GROUP_PREFIX}{'' if grader is None else f'{grader}-'}*"
    return [path for group in groups if group is not None for path in group.glob(pattern)]


class JobGroup:
    """The cgroup of one job: ``memory_bytes`` for all its processes and files in memory,
    ``tasks`` processes and threads, one equal CPU share. Made by ``create``, joined by the
    command ``wrap`` returns, ended by ``remove`` (which kills whatever is left in it)."""

    def __init__(self, name: str, memory_bytes: int, tasks: int) -> None:
        self.memory_bytes, self.tasks = memory_bytes, tasks
        self.paths = {c: _own_group(c) / name for c in CONTROLLERS}  # type: ignore[operator]

    def create(self) -> None:
        for path in self.paths.values():
            path.mkdir(exist_ok=True)
        (self.paths["memory"] / "memory.limit_in_bytes").write_text(str(self.memory_bytes))
        (self.paths["pids"] / "pids.max").write_text(str(self.tasks))
        (self.paths["cpu"] / "cpu.shares").write_text("1024")  # every job the same share

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` run by a shell that first moves itself into the group: every process it
        starts is born there, none can leave it (moving needs root)."""
        joins = " && ".join(
            f"echo $$ > {shlex.quote(str(p / 'cgroup.procs'))}" for p in self.paths.values()
        )
        return ["sh", "-c", f'{joins} && exec "$@"', "sh", *argv]

    def out_of_memory(self) -> bool:
        """Whether the kernel killed a process of the job for passing its memory limit."""
        with contextlib.suppress(OSError, ValueError):
            for line in (self.paths["memory"] / "memory.oom_control").read_text().splitlines():
                if line.startswith("oom_kill "):
                    return int(line.split()[1]) > 0
        return False

    def remove(self) -> None:
        """Kill what is left in the group, then remove it (a group holding a process cannot)."""
        for path in self.paths.values():
            for _ in range(100):
                try:
                    pids = (path / "cgroup.procs").read_text().split()
                except OSError:
                    break
                if not pids:
                    break
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError, ValueError):
                        os.kill(int(pid), signal.SIGKILL)
                time.sleep(0.05)
            with contextlib.suppress(FileNotFoundError):
                path.rmdir()
