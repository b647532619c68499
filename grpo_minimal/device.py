"""Where a model runs and in which precision: one place for the CPU / CUDA choices.

- ``pick_device("auto")``: CUDA when a GPU is visible, else the CPU.
- ``pick_dtype(device, "auto")``: the precision of the forward passes. On CUDA, bfloat16 where
  the card computes in it natively (compute capability 8.0 and newer: A100, H100, RTX 30xx/40xx),
  else float16 with loss scaling (a Colab T4 is 7.5, a V100 7.0); on the CPU, float32. Both
  backends (``lm_grpo`` and ``trl_bridge``) take the precision from here.

``torch.cuda.is_bf16_supported()`` is not the test: by default (torch 2.13) it also counts
emulated bfloat16, so it says True on a T4 or V100, where bfloat16 matmuls are emulated and slow.

Weights and optimizer state stay in float32 whatever the choice: bfloat16 / float16 is used
through ``torch.autocast`` (mixed precision). A pure-bfloat16 model cannot take the small steps
GRPO takes: with ``learning_rate=1e-6`` an update is far below bfloat16's resolution (about
0.4% of a weight) and is rounded away. float16 also needs loss scaling (``grad_scaler``) so that
small gradients do not underflow to zero.
"""

from __future__ import annotations

import contextlib
import os
import resource
import sys

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DTYPE_NAMES = ("auto", *DTYPES)
DEVICE_NAMES = ("auto", "cpu", "cuda")


def pick_device(name: str = "auto") -> torch.device:
    """``auto``: ``cuda`` if available, else ``cpu``. ``cuda`` without a GPU is an error.

    Under a launcher (``torchrun``, ``accelerate launch``: ``LOCAL_RANK`` is set) ``cuda`` means
    this process's own GPU, ``cuda:LOCAL_RANK``, as the data-parallel trainer expects."""
    if name not in DEVICE_NAMES and not name.startswith("cuda:"):
        raise ValueError(f"device must be one of {DEVICE_NAMES} (or cuda:N), got {name!r}")
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device={name!r} was asked for, but torch sees no CUDA GPU")
    if name == "cuda" and "LOCAL_RANK" in os.environ:
        return torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    return torch.device(name)


def pick_dtype(device: torch.device, name: str = "auto") -> torch.dtype:
    """The compute precision: ``auto`` is bf16 / fp16 on CUDA (see module docstring), fp32 on CPU."""
    if name not in DTYPE_NAMES:
        raise ValueError(f"dtype must be one of {DTYPE_NAMES}, got {name!r}")
    if name != "auto":
        return DTYPES[name]
    if device.type == "cuda":
        return torch.bfloat16 if native_bf16(device) else torch.float16
    return torch.float32


def native_bf16(device: torch.device) -> bool:
    """Whether the GPU ``device`` (not the current one) computes in bfloat16 natively: compute
    capability 8.0 or newer (Ampere). Below that, bfloat16 is emulated."""
    return torch.cuda.get_device_capability(device) >= (8, 0)


def autocast(device: torch.device, dtype: torch.dtype):
    """Mixed-precision context for forward passes; a no-op for float32."""
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def grad_scaler(device: torch.device, dtype: torch.dtype) -> torch.amp.GradScaler:
    """Loss scaling for float16 (enabled only then; a pass-through otherwise)."""
    return torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)


@contextlib.contextmanager
def torch_threads(n: int):
    """Run torch on ``n`` CPU threads inside the block, restored after. Tiny models run fastest
    on one (on a busy machine spinning threads cost more than the arithmetic), and a seeded run
    of many sampled steps is the same run only at the same thread count."""
    threads = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def peak_memory_mb(device: torch.device) -> float:
    """Peak memory in MiB: allocated by torch on CUDA, resident set of the process on the CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    try:  # Linux: the high-water mark of this process (ru_maxrss also counts a forking parent)
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 2**10  # KiB
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


def reset_peak_memory(device: torch.device) -> None:
    """Start ``peak_memory_mb`` afresh: torch's CUDA peak; on Linux the process's resident
    high-water mark (``/proc/self/clear_refs``, mode 5). Elsewhere on a CPU the peak cannot be
    reset, and ``peak_memory_mb`` stays the process's peak so far."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
    except OSError:
        pass


def gpu_memory_gb(device: torch.device) -> float | None:
    """The GPU's total memory in GB (10^9 bytes), None on the CPU."""
    if device.type != "cuda":
        return None
    return torch.cuda.get_device_properties(device).total_memory / 1e9
