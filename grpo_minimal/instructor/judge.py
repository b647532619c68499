"""Hidden checks judged outside the learner's kernel: a notebook cannot change its own score.

otter runs a lab's checks inside the kernel that ran the learner's notebook, where the notebook's
code can replace them (``checks.check_rloo_advantages = lambda *a, **k: None``) or forge the
results otter reads back. Here the notebook runs in its kernel as usual, then the checks run in
the grading process (the judge), which the kernel cannot reach (it is not dumpable: the kernel,
the same user, cannot open its memory or its file descriptors). A check calls the learner's
function through a ``RemoteFunction``: the arguments go to the kernel or, for a lab whose
checks measure the function (``judging.py``), to the measurer (``measurer.py``), a second
process where nothing of the notebook ran but the definitions the graded functions need
(``definitions.py``), so that no other cell can have replaced what measures them there; the
learner's function runs there, and what it returned comes back as data (tensors, numbers,
strings, lists, dicts): a safetensors file whose metadata holds the rest as JSON
(``read_exchange``), so the judge unpickles nothing either process wrote. Expected values,
comparisons and points stay in the judge. Whatever comes back is the learner's answer: a right
answer scores, anything else does not.

What a check measures about the learner's code rather than receives from it (how many times it
called ``generate`` or ``self.sample``, which completions it scored) is measured here: such an
instrument (its class lists the ``JUDGE_METHODS`` a kernel may call) stays in the judge, the
learner's function gets a stand-in, and each call of the stand-in comes back to the judge as a
request (its arguments as data) while the kernel waits for the answer.

The hidden tests (and the lab's seed in them) reach the judge on its stdin and are never written
where the kernel can read them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import re
import threading
from fractions import Fraction
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from grpo_minimal.instructor.definitions import told
from grpo_minimal.labs.checking import InKernel

KERNEL_CODE = resources.files(__package__).joinpath("kernel_code.py").read_text(encoding="utf-8")
"""Run as a cell in the learner's kernel after the notebook (``kernel_code.py``)."""

SAFE_EXCEPTIONS = (
    ValueError,
    TypeError,
    IndexError,
    KeyError,
    LookupError,
    ZeroDivisionError,
    ArithmeticError,
    OverflowError,
    AttributeError,
    NameError,
    RuntimeError,
    NotImplementedError,
    RecursionError,
    AssertionError,
    ImportError,
    ModuleNotFoundError,
    StopIteration,
    MemoryError,
    OSError,
)
"""Built-in exceptions a learner's error is rebuilt as (so ``except ValueError`` still works)."""


class LearnerError(Exception):
    """What the learner's function raised in the kernel, rebuilt in the judge: its type name and
    message; ``raised_text`` is ``checking.raised``'s text, with the line of the learner's code."""

    raised_text: str = ""


class KernelGone(LearnerError):
    """The kernel stopped answering (the notebook killed it, or it died)."""


def rebuilt_error(types: list[str], message: str, text: str) -> LearnerError:
    """An exception of the learner's type name whose base is the first built-in exception of
    its MRO (``class ParseError(ValueError)`` is caught by ``except ValueError``)."""
    safe = {kind.__name__: kind for kind in SAFE_EXCEPTIONS}
    base = next((safe[name] for name in types if name in safe), Exception)
    name = types[0] if types and str(types[0]).isidentifier() else "Exception"
    kind = type(name, (LearnerError, base), {})
    error = kind(message)
    error.raised_text = text
    return error


@dataclasses.dataclass(frozen=True)
class Opaque:
    """A value of a type the judge does not rebuild: its type name and (the learner's) repr."""

    type: str
    text: str

    def __repr__(self) -> str:
        return self.text


class Weights:
    """A model the kernel held, as its weights alone (``state_dict`` is all a check may ask)."""

    def __init__(self, state: dict[str, torch.Tensor]) -> None:
        self._state = state

    def state_dict(self) -> dict[str, torch.Tensor]:
        return dict(self._state)


def _rebuildable() -> dict[str, type]:
    """The dataclasses a learner's function may return, rebuilt in the judge by name."""
    from grpo_minimal.labs.bugs import Rollout
    from grpo_minimal.lm_train import MathConfig

    return {f"{kind.__module__}.{kind.__qualname__}": kind for kind in (MathConfig, Rollout)}


def decode(value: Any) -> Any:
    """The kernel's encoded answer as the judge's values."""
    if isinstance(value, list):
        return [decode(v) for v in value]
    if isinstance(value, tuple):
        return tuple(decode(v) for v in value)
    if not isinstance(value, dict):
        return value
    tag = value.get("__grpo__")
    if tag == "ellipsis":
        return Ellipsis
    if tag == "fraction" and isinstance(value.get("n"), int) and isinstance(value.get("d"), int):
        with contextlib.suppress(ZeroDivisionError):
            return Fraction(value["n"], value["d"])
    if tag == "module" and isinstance(value.get("state"), dict):
        return Weights(value["state"])
    if tag == "dataclass":
        kind = _rebuildable().get(str(value.get("type")))
        fields = value.get("fields")
        if kind is not None and isinstance(fields, dict):
            init = {f.name for f in dataclasses.fields(kind) if f.init}
            try:
                return kind(**{k: decode(v) for k, v in fields.items() if k in init})
            except Exception:
                pass
        return Opaque(str(value.get("type")), f"<{value.get('type')}>")
    if tag == "opaque":
        return Opaque(str(value.get("type")), str(value.get("repr"))[:300])
    return {k: decode(v) for k, v in value.items()}


MAX_EXCHANGE_BYTES = 512 * 2**20
"""The largest file the judge reads from the kernel (a lab 06 model's weights are a few MB)."""
MAX_HEADER_BYTES = 16 * 2**20
"""The largest header (the JSON of everything but the tensors) the judge parses."""
MAX_DEPTH = 64
"""How deep an answer may nest (the kernel's encoder stops at 30)."""


def read_exchange(path: Path) -> Any:
    """What the kernel wrote at ``path`` (``kernel_code.__grpo_write__``): the tensors of a
    safetensors file put back into the JSON structure of its metadata. Read only from a regular
    file (not through a symbolic link at ``path``, not a FIFO) of at most ``MAX_EXCHANGE_BYTES``,
    its header at most ``MAX_HEADER_BYTES`` and nested at most ``MAX_DEPTH`` deep; anything else
    raises ``ValueError``."""
    import json
    import os
    import stat

    from safetensors.torch import load

    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(descriptor, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_EXCHANGE_BYTES:
            raise ValueError("not a regular file of the exchange's size")
        data = handle.read(MAX_EXCHANGE_BYTES + 1)
    size = int.from_bytes(data[:8], "little")
    if size > MAX_HEADER_BYTES:
        raise ValueError(f"a header of {size} bytes")
    try:
        structure = json.loads(json.loads(data[8 : 8 + size])["__metadata__"]["structure"])
        tensors = load(data)
    except Exception as error:  # not JSON, no metadata, not safetensors: not the kernel's code
        raise ValueError(f"not an answer of the kernel's code ({type(error).__name__})") from None

    def restore(value: Any, depth: int = 0) -> Any:
        """The JSON value with its tagged tensors, tuples and int-keyed dicts rebuilt."""
        if depth > MAX_DEPTH:
            raise ValueError(f"nested more than {MAX_DEPTH} deep")
        if isinstance(value, list):
            return [restore(v, depth + 1) for v in value]
        if not isinstance(value, dict):
            return value
        tag = value.get("__grpo__")
        if tag == "tensor" and isinstance(value.get("key"), str) and value["key"] in tensors:
            return tensors[value["key"]]
        if tag == "tuple" and isinstance(value.get("items"), list):
            return tuple(restore(v, depth + 1) for v in value["items"])
        if tag == "pairs" and isinstance(value.get("items"), list):
            pairs = [p for p in value["items"] if isinstance(p, list) and len(p) == 2]
            return {k: restore(v, depth + 1) for k, v in pairs if isinstance(k, str | int)}
        return {k: restore(v, depth + 1) for k, v in value.items()}

    return restore(structure)


def _write_new(path: Path, value: Any) -> None:
    """``torch.save`` to a file the judge creates at ``path`` (the kernel loads it): never through
    a symbolic link or into a file the kernel made there (``O_EXCL | O_NOFOLLOW``)."""
    import os

    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    with os.fdopen(os.open(path, flags, 0o600), "wb") as handle:
        torch.save(value, handle)


def _write_back(original: Any, after: Any) -> None:
    """Make the judge's argument what the learner's call left of its copy (an in-place edit of
    an input is visible to the check, as it would be in the kernel)."""
    if isinstance(original, torch.Tensor) and isinstance(after, torch.Tensor):
        if original.shape == after.shape and original.dtype == after.dtype:
            with torch.no_grad():
                original.copy_(after)
    elif isinstance(original, list) and isinstance(after, list):
        if len(original) == len(after):
            for index, (mine, theirs) in enumerate(zip(original, after, strict=True)):
                if isinstance(mine, torch.Tensor | list | dict):
                    _write_back(mine, theirs)
                else:
                    original[index] = theirs
        else:
            original[:] = after
    elif isinstance(original, dict) and isinstance(after, dict):
        original.clear()
        original.update(after)


_CALL_FILE = re.compile(r"call-[0-9]{1,12}\.pt")
"""A stand-in's request, as ``kernel_code`` names it; no other name is taken for one."""


class Kernel:
    """The learner's kernel (an ``nbclient.NotebookClient``'s, the notebook already run), asked
    one request at a time through two files in ``folder``."""

    called = "the notebook's kernel"  # in what a failing check says
    refused: dict[str, str] = {}  # functions not to be called here, and why (the measurer's)

    def __init__(self, client, folder: Path, source: list[str] = ()) -> None:
        self.client, self.folder = client, Path(folder).resolve()
        self.source = list(source)  # the graded code cells, as the judge read them
        self._request, self._answer = (
            self.folder / "judge-request.pt",
            self.folder / "judge-answer.pt",
        )
        self.instruments: dict[str, Any] = {}
        self._keys = itertools.count()
        self.alive = self._run(KERNEL_CODE) is None

    def lend(self, value: Any) -> Any:
        """An argument as it travels to the kernel: an instrument of a check (its class names the
        ``JUDGE_METHODS`` the kernel may call) stays here, and the kernel gets a stand-in whose
        calls come back to it; anything else goes as it is."""
        methods = getattr(type(value), "JUDGE_METHODS", None)
        if not methods:
            return value
        key = str(next(self._keys))  # never reused: a stand-in kept from an earlier call
        self.instruments[key] = value  # reaches nothing once that call is over
        return {"__grpo_instrument__": (str(self.folder), key, type(value).__name__, methods)}

    def _serve(self, request: Path) -> None:
        """Answer one call of an instrument: its arguments are data (``read_exchange``), the
        method one its class allows; what it returns or raises goes back to the kernel. A file
        the kernel put in the way (a folder named as a request or an answer) fails that call."""
        try:
            call = read_exchange(request)
            target = self.instruments[str(call["key"])]
            method = str(call["method"])
            if method not in type(target).JUDGE_METHODS:
                raise AttributeError(f"{type(target).__name__} offers no {method!r}")
            args, kwargs = decode(call["args"]), decode(call["kwargs"])
            answer = {"ok": getattr(target, method)(*args, **dict(kwargs))}
        except Exception as error:  # the learner's call was wrong: they see why
            answer = {"raised": (type(error).__name__, str(error)[:500])}
        reply = request.with_suffix(".answer")
        with contextlib.suppress(Exception):  # a file the kernel planted there: its call fails
            request.unlink(missing_ok=True)
            reply.with_suffix(".tmp").unlink(missing_ok=True)
            _write_new(reply.with_suffix(".tmp"), answer)
            reply.with_suffix(".tmp").rename(reply)

    @contextlib.contextmanager
    def _serving(self):
        """While the kernel runs a request, a thread here answers its instruments' calls."""
        if not self.instruments:
            yield
            return
        done = threading.Event()

        def serve() -> None:
            pause = 0.0002  # short while the kernel calls, up to 20 ms while it computes
            while not done.is_set():
                requests = [
                    r for r in sorted(self.folder.glob("call-*.pt")) if _CALL_FILE.fullmatch(r.name)
                ]
                for request in requests:
                    self._serve(request)
                pause = 0.0002 if requests else min(2 * pause, 0.02)
                done.wait(pause)

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()

    def _run(self, source: str) -> str | None:
        """Run ``source`` in the kernel; None, or why it could not be run."""
        import nbformat

        cell = nbformat.v4.new_code_cell(source)
        cells = self.client.nb.cells
        cells.append(cell)  # nbclient writes outputs at the cell's index; removed after
        try:
            self.client.execute_cell(cell, len(cells) - 1)
        except Exception as error:  # a dead kernel, a time-out of nbclient's
            return f"{type(error).__name__}: {str(error)[:200]}"
        finally:
            if cells and cells[-1] is cell:
                cells.pop()
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                return f"{output.get('ename')}: {str(output.get('evalue'))[:200]}"
        return None

    def ask(self, request: dict) -> dict:
        if not self.alive:
            raise KernelGone(f"{self.called} has stopped")
        try:
            self._answer.unlink(missing_ok=True)
            self._request.unlink(missing_ok=True)
            _write_new(self._request, request)
        except OSError as error:  # the kernel put something there first
            raise KernelGone(f"the request could not be written ({error.strerror})") from None
        with self._serving():
            problem = self._run(f"__grpo_judge__({str(self._request)!r}, {str(self._answer)!r})")
        self.instruments.clear()
        if problem is not None and ("Dead" in problem or "Timeout" in problem):
            self.alive = False
        try:
            answer = read_exchange(self._answer)
        except Exception as error:
            why = problem or f"{type(error).__name__}: {str(error)[:200]}"
            raise KernelGone(f"{self.called} gave no answer ({why})") from None
        if not isinstance(answer, dict):
            raise KernelGone(f"{self.called} answered nonsense")
        return answer

    def describe(self, names: list[str]) -> dict[str, Any]:
        """What each name is in the kernel: ``("function",)``, ``("value", encoded)`` or
        ``("missing",)``; every name ``Unanswered`` once the kernel has stopped."""
        try:
            described = self.ask({"op": "describe", "names": names})
        except KernelGone as error:  # every check of these names fails, saying why
            return {name: Unanswered(str(error)) for name in names}
        return {name: described.get(name) for name in names}


def environment(described: dict[str, Any], functions: Kernel) -> dict[str, Any]:
    """What otter's test functions are called with: each name the learner's function (a
    ``RemoteFunction`` called in ``functions``, or ``Refused`` with the reason) or value; a name
    the notebook did not define is left out."""
    env: dict[str, Any] = {}
    for name, kind in described.items():
        if isinstance(kind, Unanswered):
            env[name] = kind
        elif not isinstance(kind, tuple) or not kind:
            continue
        elif kind[0] == "function" and name in functions.refused:
            env[name] = Refused(told(name, functions.refused[name]), functions.source)
        elif kind[0] == "function":
            env[name] = RemoteFunction(functions, name)
        elif kind[0] == "value" and len(kind) == 2:
            env[name] = decode(kind[1])
    return env


class Unanswered:
    """What a name stands for once the kernel has stopped: called, it raises ``KernelGone``;
    shown, it says so (a check then fails with the reason, not with "define this function")."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __repr__(self) -> str:
        return f"({self.reason})"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise KernelGone(self.reason)


class Refused(InKernel):
    """A learner's function that grading will not run beside what measures it
    (``definitions.refusal``): called or measured, it raises ``RefusedDefinition`` with
    ``reason`` (``definitions.told``'s text)."""

    def __init__(self, reason: str, source: list[str] = ()) -> None:
        self.reason, self.source = reason, list(source)

    def __repr__(self) -> str:
        return f"({self.reason})"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        error = RefusedDefinition(self.reason)
        error.raised_text = self.reason
        raise error

    def apply(self, helper, *args: Any, **kwargs: Any) -> Any:
        return self()

    def notebook_source(self) -> list[str]:
        return list(self.source)


class RefusedDefinition(LearnerError):
    """Raised in the judge for a learner's function that ``Refused`` stands for."""


class RemoteFunction(InKernel):
    """The learner's function ``name``, called in ``kernel`` (the notebook's, or the measurer);
    what it returns comes back as data and what it did to its arguments is copied back onto the
    caller's."""

    def __init__(self, kernel: Kernel, name: str) -> None:
        self.kernel, self.__name__ = kernel, name

    def __repr__(self) -> str:
        return f"<the learner's {self.__name__}>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._answer({"op": "call"}, args, kwargs)

    def notebook_source(self) -> list[str]:
        return list(self.kernel.source)

    def apply(self, helper, *args: Any, **kwargs: Any) -> Any:
        """``helper(fn, *args, **kwargs)`` run in the kernel, beside the learner's ``fn``, for a
        check that needs the function itself (its gradient, its bytecode): ``helper`` is a
        module-level function of the package."""
        where = f"{helper.__module__}:{helper.__qualname__}"
        return self._answer({"op": "apply", "helper": where}, args, kwargs)

    def _answer(self, request: dict, args: tuple, kwargs: dict) -> Any:
        lend = self.kernel.lend
        answer = self.kernel.ask(
            {
                **request,
                "name": self.__name__,
                "args": [lend(value) for value in args],
                "kwargs": {key: lend(value) for key, value in kwargs.items()},
            }
        )
        _write_back(list(args), decode(answer.get("args")))
        after = decode(answer.get("kwargs"))
        after = after if isinstance(after, dict) else {}
        _write_back(list(kwargs.values()), [after.get(key, kwargs[key]) for key in kwargs])
        if "raised" in answer and isinstance(answer["raised"], dict):
            raised = answer["raised"]
            types = [str(t) for t in raised.get("types", [])] or ["Exception"]
            raise rebuilt_error(types, str(raised.get("message", "")), str(raised.get("text", "")))
        return decode(answer.get("ok"))
