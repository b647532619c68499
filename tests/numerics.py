"""Tolerances for comparisons in float64 that come from the math, not from one CPU."""

from __future__ import annotations

import torch

FLOAT32_ULP = 2**-24
"""Relative rounding of float32 (half the gap between 1 and the next float32)."""


def assert_close_float64(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Equal up to the model's own float32 parts: even in float64, transformers' Qwen2 computes
    its rotary cos / sin tables in float32 (``modeling_qwen2.py``, ``freqs = position_ids.float()
    * inv_freq``), and vectorised and scalar cos / sin may differ by an ulp, which depends on the
    CPU and on the tensor's shape. So two paths agree to a few float32 ulps (2**-24) of the
    values' scale, amplified by the layers: 64 ulps of the scale, far below any real bug."""
    scale = expected.abs().max().item() + 1.0
    torch.testing.assert_close(actual, expected, rtol=0, atol=64 * FLOAT32_ULP * scale)


def assert_close_float32_sums(actual: torch.Tensor, expected: torch.Tensor, terms: int) -> None:
    """Two float32 computations of the same sums, in different orders (another library, another
    CPU, another thread count): the worst-case error of a float32 sum of ``terms`` terms is
    about ``terms`` * 2**-24 of its scale (Higham, "Accuracy and Stability of Numerical
    Algorithms", 2002, section 4.2). A real bug moves values by a large part of their scale."""
    scale = expected.abs().max().item() + FLOAT32_ULP
    torch.testing.assert_close(
        actual.double(), expected.double(), rtol=0, atol=terms * FLOAT32_ULP * scale
    )
