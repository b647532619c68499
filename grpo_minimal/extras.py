"""The optional parts of the course and the extra that installs each.

A base install (``pip install grpo-minimal``) runs every course notebook, the CartPole and math
commands and the tiny models. Five roads need more, each from an extra of ``pyproject.toml``:
``labs`` (otter-grader: ``grpo-minimal lab check | grade | build`` and the lab notebooks), ``trl``
(TRL's ``GRPOTrainer``: ``math --backend trl``, notebook 06's comparison), ``gpu`` (the
real-model path: GSM8K from the Hub, accelerate, DeepSpeed) and ``fetch`` (the ``gguf`` reader
``grpo-minimal fetch`` converts a real model with, notebook 11) and ``lora`` (peft: ``--lora-r``). ``require`` turns a missing one into
one line that names the extra to install, instead of an ImportError deep in a traceback.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import shlex

__all__ = [
    "EXTRAS",
    "MissingExtra",
    "missing_extra_message",
    "pip_requirements",
    "require",
]

EXTRAS = {
    "labs": ("otter",),
    "trl": ("trl", "datasets"),
    "gpu": ("trl", "datasets", "accelerate"),
    "fetch": ("gguf",),
    "lora": ("peft",),
}
"""The modules each extra brings that the code imports (an extra may install more)."""


class MissingExtra(ImportError):
    """An optional part of the course is not installed; the message names its extra."""


def _known(extra: str) -> str:
    if extra not in EXTRAS:
        raise ValueError(f"extra: {extra!r} is not one of {', '.join(EXTRAS)}")
    return extra


def _missing(extra: str) -> list[str]:
    return [module for module in EXTRAS[_known(extra)] if not _importable(module)]


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ValueError:  # in sys.modules without a spec (a stand-in set by a test): present
        return True


def missing_extra_message(extra: str, what: str) -> str:
    """``what needs the [extra] extra (missing: ...): pip install ...``, or "" when nothing is
    missing. The command installs the extra's own requirements, read from the installed
    package, so it works however the package was installed (a wheel, the repository, a clone)."""
    missing = _missing(extra)
    if not missing:
        return ""
    command = pip_requirements(extra) or f'"grpo-minimal[{extra}]"'
    return (
        f"{what} needs the [{extra}] extra (missing: {', '.join(missing)}): pip install {command}"
    )


def require(extra: str, what: str) -> None:
    """Raise ``MissingExtra`` with one line naming ``extra`` when part of it is missing."""
    message = missing_extra_message(extra, what)
    if message:
        raise MissingExtra(message)


def pip_requirements(extra: str) -> str:
    """The requirements ``extra`` adds, as the installed package declares them, quoted for a
    shell: what a lab notebook's set-up cell gives ``%pip install`` when the extra is missing."""
    from packaging.requirements import Requirement

    _known(extra)
    try:
        declared = importlib.metadata.requires("grpo-minimal") or []
    except importlib.metadata.PackageNotFoundError:  # the package folder alone, not installed
        declared = []
    wanted = []
    for line in declared:
        requirement = Requirement(line)
        if requirement.marker is not None and requirement.marker.evaluate({"extra": extra}):
            requirement.marker = None
            wanted.append(shlex.quote(str(requirement)))
    return " ".join(wanted)
