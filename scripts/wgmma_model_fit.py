"""Fit the 16-bit `wgmma` split regime's time model (`WGMMA_MODEL` in host/src/ops/matmul.rs) to a
sweep of every tile and slice count (docs/wgmma-sweep-h100.csv), then score its picks on shapes
it was not fitted to (docs/wgmma-sweep-fresh-h100.csv): time of the pick against the fastest
configuration and against the plan before the model.

    python3 scripts/wgmma_model_fit.py [SWEEP.csv [FRESH.csv]]     (needs numpy and scipy)
"""
import collections
import csv
import math
import sys

import numpy as np
from scipy.optimize import least_squares

SMS = 132
TILES = {"128x256": (128, 256), "128x192": (128, 192), "128x64": (128, 64)}


def cdiv(a, b):
    return -(-a // b)


def load(path):
    """{(layout, m, n, k): {(tile, slices): µs}}; the 256×128 tile is left out (never fastest)."""
    shapes = collections.defaultdict(dict)
    with open(path) as f:
        for row in csv.DictReader(line for line in f if not line.startswith("#")):
            key = (row["layout"], int(row["m"]), int(row["n"]), int(row["k"]))
            if row["tile"] in TILES or row["tile"] in ("plan", "cublas"):
                shapes[key][(row["tile"], int(row["slices"]))] = float(row["ms"]) * 1e3
    return shapes


def predict(p, shape, tile, slices):
    """µs by the model with p = (fill µs, k-step ns) per tile, then split µs and TB/s."""
    _, m, n, k = shape
    bm, bn = TILES[tile]
    i = list(TILES).index(tile)
    tiles = cdiv(m, bm) * cdiv(n, bn)
    chunk = k if slices == 1 else cdiv(cdiv(k, slices), 64) * 64
    if slices == 1 and m > bm and bn > 64:
        waves = cdiv(cdiv(cdiv(m, bm), 2) * cdiv(n, bn), SMS // 2)
    else:
        waves = cdiv(tiles * slices, SMS)
    t = waves * (p[2 * i] + cdiv(chunk, 64) * p[2 * i + 1] / 1e3)
    if slices > 1:
        t += p[6] + (slices * 8 + 2) * m * n / (p[7] * 1e6)
    return t


def configs(v):
    return [c for c in v if c[0] in TILES]


def fit(shapes):
    """The tiles' fill and k-step from the unsplit launches, then the split's costs from the split
    ones with those fixed."""
    points = [(s, c, v[c]) for s, v in shapes.items() for c in configs(v)]
    resid = lambda p, pts: [(predict(p, s, *c) - t) / t for s, c, t in pts]  # noqa: E731
    robust = dict(loss="soft_l1", f_scale=0.1)
    whole = [x for x in points if x[1][1] == 1]
    p = least_squares(lambda q: resid(list(q) + [0, 1], whole), [8, 500] * 3,
                      bounds=([0, 50] * 3, [40, 3000] * 3), **robust).x
    split = [x for x in points if x[1][1] > 1]
    q = least_squares(lambda q: resid(list(p) + list(q), split), [7, 2.4],
                      bounds=([0, 0.3], [40, 10]), **robust).x
    return list(p) + list(q)


def pick(p, shape, v):
    _, _, n, _ = shape
    fits = lambda c: c[0] != "128x192" or 10 * cdiv(n, 192) * 192 <= 11 * cdiv(n, 256) * 256  # noqa: E731
    return min((c for c in configs(v) if fits(c)), key=lambda c: predict(p, shape, *c))


def score(p, shapes, label):
    gm = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))  # noqa: E731
    vs_best, vs_plan = [], []
    for shape, v in shapes.items():
        t = v[pick(p, shape, v)]
        vs_best.append(t / min(v[c] for c in configs(v)))
        vs_plan.append(v[("plan", 0)] / t)
    print(f"{label}: {len(shapes)} shapes, pick / fastest geomean {gm(vs_best):.3f} (worst "
          f"{max(vs_best):.3f}), plan before / pick geomean {gm(vs_plan):.3f} (min {min(vs_plan):.3f})")


def main():
    sweep = load(sys.argv[1] if len(sys.argv) > 1 else "docs/wgmma-sweep-h100.csv")
    fresh = load(sys.argv[2] if len(sys.argv) > 2 else "docs/wgmma-sweep-fresh-h100.csv")
    p = fit(sweep)
    for i, tile in enumerate(TILES):
        print(f"{tile}: fill {p[2 * i]:.2f} µs, k-step {p[2 * i + 1]:.1f} ns")
    print(f"split: {p[6]:.2f} µs fixed, f32 sums at {p[7]:.2f} TB/s")
    score(p, sweep, "fitted shapes")
    score(p, fresh, "held-out shapes")


if __name__ == "__main__":
    main()
