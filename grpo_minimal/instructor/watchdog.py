"""A job's bounds where no cgroup can be had (an ordinary user, root on cgroup v2): a thread of the
grading process that watches the job from outside, through ``/proc``, and ends it whole.

Every process of a sandboxed job lives in the sandbox's process-id namespace, so the job is
every process in that namespace, double forks and new sessions included. Each poll sums:
- memory: each process's anonymous and shared-memory pages and its swap (``/proc/PID/status``);
  where that passes the bound, again as proportional shares (``smaps_rollup``: pages a fork
  shares with its parent count once), plus what the job's memory file systems hold (scratch,
  ``/tmp``, ``/dev/shm``), read with ``statvfs`` through a job process's own root
  (``/proc/PID/root``);
- processes and threads;
- CPU demand: how many of its threads ran or waited to run, on average over a few seconds,
  each thread's time kept once it has ended (threads and processes that come and go do not
  hide their time).

Past a bound the whole job is killed (its namespace's init: the kernel ends everything in it),
and the row says which bound it met. What it cannot do: share the CPU out fairly (a job is ended,
not slowed, and only once it has kept ``CPU_SLACK`` times its share busy over
``CPU_WINDOW_S``; a storm of forks that copies a kernel's pages hundreds of times is such a job
on a loaded machine and not on an idle one),
nor stop an allocation between two polls: a fast allocator gets past the memory bound by what it
allocates in one poll, and more where a job of hundreds of processes is polled less often (the
guide gives the figures measured).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections import deque

POLL_S = 0.05
"""Seconds between two polls: a fast allocator touches a few hundred MB in one (measured)."""
CPU_WINDOW_S = 5.0
"""A job above its CPU bound on average over this long is ended."""
CPU_EVERY_S = POLL_S
"""Seconds between two readings of a job's CPU demand (a file per thread): every poll, so that a
process that lives a tenth of a second is seen, and its time kept once it has ended."""
CPU_SLACK = 4
"""A job may keep this many times its share of the cores busy before it is ended. A right
notebook that prints fast keeps its kernel, the kernel's I/O thread and the grading process
busy at once (2.8 threads of a 1-core share for the hostile class's flood, measured); a
classmate beside a job of 4 busy threads still gets a fifth of the cores, where one beside 400
busy processes stopped at its time limit."""
SANDBOX_OWN = 2
"""Processes of the sandbox's own beside the job's count of them: bwrap's init and, as root, the
second bwrap (``sandbox.NO_USER_NAMESPACES``). The kernel already holds a job's own count at
its process limit (per user id as root, per user namespace otherwise: 510 forks and 512 tasks
seen as nobody, 514 as root); this count is the watchdog's second line."""


def _namespace(pid: int) -> str | None:
    with contextlib.suppress(OSError):
        return os.readlink(f"/proc/{pid}/ns/pid")
    return None


def _children(pid: int) -> list[int]:
    found = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/children") as f:
                found += [int(child) for child in f.read().split()]
    return found


def sandbox_init(pid: int) -> tuple[int, str] | None:
    """The init of the process-id namespace below ``pid`` (bwrap's child) and the namespace, or
    None while there is none yet."""
    own = _namespace(os.getpid())
    pending = [pid]
    while pending:
        process = pending.pop(0)
        namespace = _namespace(process)
        if namespace is not None and namespace != own:
            return process, namespace
        pending += _children(process)
    return None


def processes_in(namespace: str, known: dict[int, bool]) -> list[int]:
    """Every process in the process-id namespace ``namespace`` (seen from this one). ``known``
    remembers, for each process still there, whether it is: a process's namespace never changes,
    and its number is taken again only after the kernel has gone through every other number,
    far more forks than one poll's time allows (so a poll reads the links of new ones only)."""
    names = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    seen = {pid: known[pid] if pid in known else _namespace(pid) == namespace for pid in names}
    known.clear()
    known.update(seen)
    return [pid for pid, inside in seen.items() if inside]


def _fields(path: str, names: tuple[str, ...]) -> dict[str, str]:
    values = {}
    with contextlib.suppress(OSError), open(path) as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in names:
                values[key] = value.strip()
    return values


def _kib(value: str | None) -> int:
    return int(value.split()[0]) * 1024 if value else 0


STATUS = ("RssAnon", "RssShmem", "VmSwap", "Threads", "NSpid")
SHARES = ("Pss_Anon", "Pss_Shmem", "SwapPss")


INODE_BYTES = 1024
"""Kernel memory a file in a memory file system costs whatever its size (measured: 200,000
empty files took 197 MB), which no block count shows."""


def files_held(pid: int, places: list[str]) -> int:
    """Bytes the memory file systems at ``places`` hold, as process ``pid`` sees them: their
    blocks, and ``INODE_BYTES`` for each file (a million empty ones are a GB)."""
    held = 0
    for place in places:
        with contextlib.suppress(OSError):
            fs = os.statvfs(f"/proc/{pid}/root{place}")
            held += (fs.f_blocks - fs.f_bfree) * fs.f_frsize
            held += (fs.f_files - fs.f_ffree) * INODE_BYTES
    return held


def process_file(pid: int, name: str) -> str:
    """``/proc/PID/<name>``, or the same file of a thread still alive where the process's first
    thread has exited (then its own file no longer says what the others hold)."""
    with contextlib.suppress(OSError, StopIteration):
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rpartition(")")[2].split()[0] == "Z":
                tid = next(t for t in os.listdir(f"/proc/{pid}/task") if t != str(pid))
                return f"/proc/{pid}/task/{tid}/{name}"
    return f"/proc/{pid}/{name}"


def demand_ns(pid: int) -> dict[int, int]:
    """Nanoseconds each thread of ``pid`` has run or waited to run (``schedstat``), by thread id:
    over a time, how many of them wanted a core, however loaded the machine (the time they ran
    would fall as other work takes the cores, while a classmate starves all the same)."""
    totals = {}
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with (
                contextlib.suppress(OSError, ValueError),
                open(f"/proc/{pid}/task/{task}/schedstat") as f,
            ):
                ran, waited, _ = f.read().split()
                totals[int(task)] = int(ran) + int(waited)
    return totals


class Demand:
    """A job's CPU demand so far, in nanoseconds, that only grows: each thread's total as last
    read, and once a thread is gone (or its id is taken by a new one, whose total starts
    again), its last total kept. A job whose processes keep ending and being replaced hides
    nothing but what its threads did since the last reading."""

    def __init__(self) -> None:
        self.seen: dict[int, int] = {}
        self.retired = 0

    def read(self, pids: list[int]) -> int:
        now = {}
        for pid in pids:
            now.update(demand_ns(pid))
        for tid, last in self.seen.items():
            if now.get(tid, -1) < last:  # ended, or its id taken again
                self.retired += last
        self.seen = now
        return self.retired + sum(now.values())


WATCHED: list[dict] = []
"""What each job's watchdog saw and its own CPU time, in this process (the tests, the bench)."""


class Watchdog:
    """Watches the job whose sandbox is process ``pid`` (bwrap) until ``stop``; ends it past
    ``memory_bytes`` (its processes' memory and ``places``' files), ``tasks`` processes and
    threads (and ``SANDBOX_OWN``), or ``CPU_SLACK`` times ``cores`` kept busy for
    ``CPU_WINDOW_S``. ``reason`` says which ("memory", "processes", "cpu"; "error" where it
    could not read the job, which it ends too), or None."""

    def __init__(
        self,
        pid: int,
        memory_bytes: int,
        tasks: int,
        cores: float,
        places: list[str],
        poll_s: float = POLL_S,
    ) -> None:
        self.pid, self.memory_bytes, self.tasks, self.cores = pid, memory_bytes, tasks, cores
        self.places, self.poll_s = places, poll_s
        self.reason: str | None = None
        self.peak = {"memory": 0, "tasks": 0, "cores": 0.0, "poll_s": 0.0}  # what it saw
        self.cpu_s = 0.0  # the CPU time its own thread took
        self._shares = _Shares()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def start(self) -> Watchdog:
        self._thread.start()
        return self

    def stop(self) -> str | None:
        self._stop.set()
        self._thread.join()
        WATCHED.append({**self.peak, "cpu_s": self.cpu_s, "bound": self.reason})
        return self.reason

    def _watch(self) -> None:
        found = None
        while found is None and not self._stop.wait(self.poll_s):
            found = sandbox_init(self.pid)
        if found is None:
            return
        init, namespace = found
        history: deque[tuple[float, int]] = deque()
        self._demand = Demand()
        known: dict[int, bool] = {}
        wait = self.poll_s
        while not self._stop.wait(wait):
            began = time.thread_time()
            pids = processes_in(namespace, known)
            if not pids:
                break  # the job has ended
            try:
                reason = self._measure(pids, history)
            except Exception:  # a bug of ours: the job is ended, never left unbounded
                reason = "error"
            if reason is not None:
                self.reason = reason
                with contextlib.suppress(OSError):  # its init: the kernel ends the rest
                    os.kill(init, signal.SIGKILL)
                break
            # a job of hundreds of processes costs more to read: at most a tenth of a core
            wait = max(self.poll_s, 9 * (time.thread_time() - began))
            self.peak["poll_s"] = max(self.peak["poll_s"], wait)
        self.cpu_s = time.thread_time()

    def _measure(self, pids: list[int], history: deque) -> str | None:
        cheap, tasks = {}, 0
        inside = None  # a process past the sandbox's setup: its root is the job's
        for pid in pids:
            status = _fields(process_file(pid, "status"), STATUS)
            cheap[pid] = sum(_kib(status.get(key)) for key in STATUS[:3])
            tasks += int(status.get("Threads") or 0)
            if inside is None and status.get("NSpid", "1").split()[-1] != "1":
                inside = pid
        held = files_held(inside, self.places) if inside is not None else 0
        memory = sum(cheap.values())
        if memory + held > self.memory_bytes:  # pages a fork shares with its parent, once
            memory = self._shares.total(cheap, self.memory_bytes - held)
        self.peak["memory"] = max(self.peak["memory"], memory + held)
        self.peak["tasks"] = max(self.peak["tasks"], tasks)
        if memory + held > self.memory_bytes:
            return "memory"
        if tasks > self.tasks + SANDBOX_OWN:
            return "processes"
        now = time.monotonic()
        if history and now - history[-1][0] < CPU_EVERY_S:
            return None
        history.append((now, self._demand.read(pids)))
        while len(history) > 2 and now - history[1][0] >= CPU_WINDOW_S:
            history.popleft()  # keep one reading at least a window old
        elapsed = now - history[0][0]
        if elapsed >= CPU_WINDOW_S:  # threads that wanted a core, on average over the window
            busy = (history[-1][1] - history[0][1]) / 1e9 / elapsed
            self.peak["cores"] = max(self.peak["cores"], busy)
            if busy > self.cores * CPU_SLACK:
                return "cpu"
        return None


class _Shares:
    """The job's memory as proportional shares (``smaps_rollup``), which cost some 3 ms a process
    of a kernel's size: read for a few processes each poll (``SHARES_BUDGET_S``), largest and
    grown first, the others taken as last read plus what they have grown since, and one not
    read yet as its pages counted whole. Pages a fork copies on writing, without growing, are
    seen when its turn comes round. Shares read at different times do not add up (a fork's
    share falls as its siblings are born), so a total past the bound is read again whole before
    it ends a job: a fork bomb's hundreds of copies of a kernel are not taken for hundreds of
    kernels."""

    def __init__(self) -> None:
        self.read: dict[int, tuple[int, int, float]] = {}  # pid: (shares, cheap then, when)

    def total(self, cheap: dict[int, int], bound: int) -> int:
        self.read = {pid: value for pid, value in self.read.items() if pid in cheap}
        never = sorted((pid for pid in cheap if pid not in self.read), key=lambda p: -cheap[p])
        grown = [pid for pid, (_, then, _) in self.read.items() if cheap[pid] > then]
        oldest = sorted(self.read, key=lambda pid: self.read[pid][2])
        deadline = time.thread_time() + SHARES_BUDGET_S
        for pid in dict.fromkeys([*grown, *never, *oldest]):
            if time.thread_time() > deadline:
                break
            self._read(pid, cheap[pid])
        if self._sum(cheap) > bound:  # the verdict from one reading of them all
            for pid in cheap:
                self._read(pid, cheap[pid])
        return self._sum(cheap)

    def _read(self, pid: int, cheap: int) -> None:
        values = _fields(process_file(pid, "smaps_rollup"), SHARES).values()
        self.read[pid] = (sum(_kib(v) for v in values), cheap, time.monotonic())

    def _sum(self, cheap: dict[int, int]) -> int:
        unread = sum(value for pid, value in cheap.items() if pid not in self.read)
        return unread + sum(
            shares + max(0, cheap[pid] - then) for pid, (shares, then, _) in self.read.items()
        )


SHARES_BUDGET_S = 0.01
"""CPU seconds a poll may spend reading proportional shares."""


class GroupWatch:
    """A job in a cgroup of its own: the kernel kills one of its processes at the memory limit,
    and the job may go on without it. Ending the whole job then (``end``) gives it the row the
    watchdog gives it where there is no cgroup."""

    def __init__(self, out_of_memory, end, poll_s: float = POLL_S) -> None:
        self.out_of_memory, self.end, self.poll_s = out_of_memory, end, poll_s
        self.reason: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def start(self) -> GroupWatch:
        self._thread.start()
        return self

    def stop(self) -> str | None:
        self._stop.set()
        self._thread.join()
        return self.reason

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            if self.out_of_memory():
                self.reason = "memory"
                self.end()
                return
