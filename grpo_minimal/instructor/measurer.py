"""The measurer: a second process, beside the learner's kernel, where the checks call the
learner's functions once their notebook has run.

Nothing of the notebook runs there but the definitions its graded functions need, read from its
source and held to a policy (``definitions.py``): a cell that replaced a measuring helper of the
package in the kernel (lab 03's ``ratio_gradient``, lab 05's ``_bound_call``) replaced nothing
here. The process starts before the learner's kernel does (it imports torch and the lab's
checks while the notebook runs) and makes itself not dumpable first (having imported only
``ctypes`` and ``sys``), before the kernel starts and so before any learner code exists, so no
process of the same user (the kernel, or one it left behind) can open its memory; it talks to
the judge through two pipes only the judge holds. The judge asks it as it asks a kernel (``judge.Kernel``): same
requests, same answers as data, same stand-ins for the check's instruments.

Started by ``start`` (``BOOT``); what it reads (the judge's, pickled) is trusted; what it writes
back (a line of JSON) is not.
"""

from __future__ import annotations

import json
import os
import pickle
import struct
import subprocess
import sys
from pathlib import Path

from grpo_minimal.instructor.definitions import Definitions
from grpo_minimal.instructor.judge import Kernel

MAX_REPLY_BYTES = 64 * 1024
"""The longest line the judge reads back from the measurer (an error's name and first words)."""


BOOT = """
import ctypes, sys
if ctypes.CDLL(None).prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE = 4, before anything else
    sys.exit("the measuring process cannot make itself not dumpable")
sys.stdout.buffer.write(b"ready\\n")
sys.stdout.flush()
from grpo_minimal.instructor.measurer import _serve
_serve()
"""
"""The measurer's first lines: not dumpable before it imports the package, then ready."""


def start(modules: list[str]) -> subprocess.Popen:
    """The measurer's process, importing ``modules`` (the lab's checks) while it waits;
    returned once it has made itself not dumpable (before any learner code can exist)."""
    process = subprocess.Popen(
        [sys.executable, "-P", "-c", BOOT, *modules],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        close_fds=True,
    )
    if process.stdout.readline(64) != b"ready\n":  # it stopped: every call will say so
        process.kill()
    return process


class Measurer(Kernel):
    """The measurer's process (``start``), asked as a ``Kernel`` once ``definitions`` ran there:
    each request a cell of code sent down its pipe."""

    called = "the process that runs your functions for the checks"

    def __init__(
        self, process: subprocess.Popen, folder: Path, source: list[str], definitions: Definitions
    ) -> None:
        self.process = process
        self.refused = dict(definitions.refused)
        self._send({"cells": definitions.cells})
        super().__init__(None, folder, source)

    def _send(self, message: dict) -> str | None:
        """Send ``message``; None once the measurer has run it, else why not, in one line."""
        try:
            data = pickle.dumps(message)
            self.process.stdin.write(struct.pack("<Q", len(data)) + data)
            self.process.stdin.flush()
            line = self.process.stdout.readline(MAX_REPLY_BYTES)
        except (OSError, ValueError) as error:
            return f"DeadKernelError: the measuring process stopped ({type(error).__name__})"
        if not line.endswith(b"\n"):
            return "DeadKernelError: the measuring process stopped"
        try:
            reply = json.loads(line)
        except ValueError:
            return "RuntimeError: the measuring process answered nonsense"
        problem = reply.get("error") if isinstance(reply, dict) else "?"
        return None if problem is None else str(problem)[:300]

    def _run(self, source: str) -> str | None:
        return self._send({"run": source})


def _serve() -> None:
    """The measurer's side: run what the judge sends, in a namespace of the learner's alone."""
    import builtins
    import importlib
    import linecache

    requests, replies = os.fdopen(os.dup(0), "rb"), os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDWR)  # the learner's print() goes nowhere, not down the pipe
    os.dup2(null, 0)
    os.dup2(null, 1)
    sys.stdin, sys.stdout = open(os.devnull), open(os.devnull, "w")  # noqa: SIM115
    import torch  # noqa: F401 (imported while the notebook runs in its kernel)

    for module in sys.argv[1:]:
        try:
            importlib.import_module(module)
        except Exception:
            pass
    space = {"__name__": "__main__", "__builtins__": builtins}

    def reply(error: str | None) -> None:
        replies.write(json.dumps({"error": error}).encode() + b"\n")
        replies.flush()

    while header := requests.read(8):
        message = pickle.loads(requests.read(struct.unpack("<Q", header)[0]))
        if "cells" in message:
            for index, (text, module) in enumerate(message["cells"]):
                filename = f"<cell {index}>"
                linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
                for statement in module.body:  # one failing definition stops no other
                    try:
                        code = compile(
                            type(module)(body=[statement], type_ignores=[]), filename, "exec"
                        )
                        exec(code, space)
                    except BaseException:
                        pass
            reply(None)
            continue
        try:
            exec(compile(message["run"], "<judge>", "exec"), space)
        except BaseException as error:
            reply(f"{type(error).__name__}: {str(error)[:200]}")
            continue
        reply(None)
