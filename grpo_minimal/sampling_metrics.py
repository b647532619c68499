"""Judging a model by several samples per problem: pass@k and majority vote (maj@k).

For one problem, sample n completions and let c of them be correct (by the verifier,
``rewards.accuracy_reward``). Then

    pass@k = 1 - C(n - c, k) / C(n, k)

is the probability that at least one of k completions drawn without replacement from the n is
correct: the unbiased estimator of Chen et al. 2021 (arXiv:2107.03374, section 2.1, equation 1),
averaged over problems. pass@1 is c / n, the sampled accuracy. maj@k (self-consistency, Wang et
al. 2022, arXiv:2203.11171) asks instead whether the answer most of the k completions give is
the right one: no verifier needed at test time, only agreement.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Sequence


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem: n samples, c correct, 1 <= k <= n.

    Exact integer binomials (``math.comb``), so no rounding until the final division.
    """
    if not (isinstance(n, int) and n >= 1):
        raise ValueError(f"n (samples per problem) must be an integer >= 1, got {n!r}")
    if not (isinstance(c, int) and 0 <= c <= n):
        raise ValueError(f"c (correct samples) must be an integer in [0, n={n}], got {c!r}")
    if not (isinstance(k, int) and 1 <= k <= n):
        raise ValueError(f"k must be an integer in [1, n={n}], got {k!r}")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def majority_vote(answers: Sequence[Hashable | None]) -> Hashable | None:
    """The answer given most often, ignoring ``None`` (no answer); ties go to the answer that
    was sampled first. None when no completion gave an answer.

    Answers should be values, not text (``answers.extract_value``): "1/2" and "0.5" then vote
    together.
    """
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return None
    top = max(counts.values())
    return next(a for a in answers if a is not None and counts[a] == top)
