"""Is a difference larger than the noise? Pure Python, no scipy.

The inputs are per-repetition figures (one p50 or p99 per guest boot), not per-operation samples:
operations inside one boot share that boot's luck (where its threads landed, what the machine was
doing), so the repetition is the unit that is independent.

- ``ratio_ci``: a percentile bootstrap interval of median(b) / median(a), resampling each group
  with replacement (seeded, so a result file is reproducible from its per-run figures).
- ``mann_whitney``: the two-sided Mann-Whitney U test. Exact (every split of the pooled figures
  enumerated, so ties are handled) up to 200,000 splits; beyond that the normal approximation with
  the tie correction.
- ``compare``: both, and a verdict. A difference counts as beyond the noise only when the bootstrap
  interval excludes 1 and the rank test gives p < 0.05.
"""

from __future__ import annotations

import itertools
import math
import random
import statistics

from .common import quantile

ALPHA = 0.05
MIN_RUNS = 3  # fewer runs per group than this: no verdict
EXACT_LIMIT = 200_000


def ratio_ci(a: list[float], b: list[float], resamples: int = 4000, seed: int = 1,
             level: float = 0.95) -> tuple[float, float]:
    """Bootstrap interval of median(b)/median(a)."""
    rng = random.Random(seed)
    ratios = []
    for _ in range(resamples):
        ma = statistics.median(rng.choices(a, k=len(a)))
        mb = statistics.median(rng.choices(b, k=len(b)))
        ratios.append(mb / ma if ma > 0 else math.inf)
    tail = (1 - level) / 2
    return quantile(ratios, tail), quantile(ratios, 1 - tail)


def _ranks(values: list[float]) -> list[float]:
    """Mid-ranks (1-based) of values, ties sharing the mean of their ranks."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def mann_whitney(a: list[float], b: list[float]) -> tuple[float, float]:
    """(U of a, two-sided p) for H0: a and b come from the same distribution."""
    n1, n2 = len(a), len(b)
    ranks = _ranks(list(a) + list(b))
    r1 = sum(ranks[:n1])
    u1 = r1 - n1 * (n1 + 1) / 2
    mean = n1 * n2 / 2
    if math.comb(n1 + n2, n1) <= EXACT_LIMIT:
        observed = abs(u1 - mean)
        total = extreme = 0
        for idx in itertools.combinations(range(n1 + n2), n1):
            u = sum(ranks[i] for i in idx) - n1 * (n1 + 1) / 2
            total += 1
            if abs(u - mean) >= observed - 1e-9:
                extreme += 1
        return u1, extreme / total
    n = n1 + n2
    ties = {}
    for r in ranks:
        ties[r] = ties.get(r, 0) + 1
    tie_term = sum(t ** 3 - t for t in ties.values()) / (n * (n - 1))
    sd = math.sqrt(n1 * n2 / 12 * ((n + 1) - tie_term))
    if sd == 0:
        return u1, 1.0
    z = (abs(u1 - mean) - 0.5) / sd
    return u1, min(1.0, math.erfc(max(z, 0) / math.sqrt(2)))


def compare(base: list[float], other: list[float]) -> dict:
    """``other`` against ``base`` (lower is better): ratio of medians, interval, p, verdict."""
    out = {"n_base": len(base), "n": len(other)}
    if not base or not other or statistics.median(base) <= 0:
        return {**out, "ratio": None, "ci95": None, "p": None, "verdict": "no data"}
    ratio = statistics.median(other) / statistics.median(base)
    out["ratio"] = ratio
    if min(len(base), len(other)) < MIN_RUNS:
        return {**out, "ci95": None, "p": None,
                "verdict": f"too few runs for a verdict (need {MIN_RUNS} per variant)"}
    lo, hi = ratio_ci(base, other)
    _, p = mann_whitney(base, other)
    out.update(ci95=[lo, hi], p=p)
    if p < ALPHA and (hi < 1 or lo > 1):
        out["verdict"] = "lower, beyond noise" if hi < 1 else "higher, beyond noise"
    else:
        out["verdict"] = "within noise"
    return out
