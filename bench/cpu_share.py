"""What a cgroup per job does for the CPU: a lone busy process beside a job of 8 busy ones.

    sudo .venv/bin/python bench/cpu_share.py     # as root, where cgroup v1 is mounted

Each round runs the crowd (8 processes that spin for 10 s) and, half a second later, the lone
process (it spins for 10 s too), then reads the CPU seconds the lone process got. Without
groups the scheduler shares the cores per process (9 processes on 2 cores: the lone one gets
2/9 of a core, then its last half second alone); with each job in a group of its own
(``cgroups.JobGroup``, equal ``cpu.shares``) the lone job gets half the machine, which is all
one process can use on 2 cores. Rounds alternate, so a
machine that grows busier hurts both alike. Writes ``bench/results/cpu_share.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from provenance import provenance  # bench/ is on the path when a script here runs

from grpo_minimal.instructor import cgroups

OUT = Path(__file__).resolve().parent / "results/cpu_share.json"
SPIN = "import time\nend = time.time() + {s}\nwhile time.time() < end:\n    pass\n"


def lone_cpu_seconds(with_groups: bool, seconds: float, crowd: int) -> float:
    """CPU seconds (user + system) the lone process got beside the crowd."""
    groups: list[cgroups.JobGroup] = []

    def start(argv: list[str], name: str) -> subprocess.Popen:
        if with_groups:
            group = cgroups.JobGroup(f"{cgroups.GROUP_PREFIX}bench-{name}", 2**30, 64)
            group.create()
            groups.append(group)
            argv = group.wrap(argv)
        return subprocess.Popen(argv)

    spin = [sys.executable, "-c", SPIN.format(s=seconds)]
    crowd_job = start(
        [
            sys.executable,
            "-c",
            "import subprocess, sys\n"
            f"ps = [subprocess.Popen({spin!r}) for _ in range({crowd})]\n"
            "[p.wait() for p in ps]",
        ],
        "crowd",
    )
    try:
        time.sleep(0.5)  # the crowd first: the lone process comes to a busy machine
        lone = start(spin, "lone")
        _, _, usage = os.wait4(lone.pid, 0)
        crowd_job.wait()
    finally:
        for group in groups:
            group.remove()
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--crowd", type=int, default=8)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    if why := cgroups.available():
        sys.exit(f"bench/cpu_share.py: no cgroup per job here ({why})")
    rounds = {"without": [], "with_groups": []}
    for _ in range(args.rounds):
        for mode, with_groups in (("without", False), ("with_groups", True)):
            rounds[mode].append(round(lone_cpu_seconds(with_groups, args.seconds, args.crowd), 2))
    result = {
        "seconds": args.seconds,
        "crowd": args.crowd,
        "lone_cpu_seconds": rounds,
        "left_behind": [str(path) for path in cgroups.left_behind()],
        "provenance": provenance(threads=None),  # plain processes, no torch
    }
    args.out.with_suffix(".tmp").write_text(json.dumps(result, indent=1) + "\n")
    args.out.with_suffix(".tmp").replace(args.out)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
