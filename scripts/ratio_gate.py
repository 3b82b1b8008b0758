#!/usr/bin/env python3
"""Speed regression gate: compare the ratios of a bench_report JSON (ferrocuda vs PyTorch, timed
in the same run) with a committed baseline of ratios, and fail when any baseline row's ratio
dropped by more than the tolerance (default 10%). Absolute times are never compared: they move
with the machine, the ratio to a baseline measured beside them much less.

    scripts/ratio_gate.py bench_report.json docs/bench-baseline.json [--tolerance 0.10]
    scripts/ratio_gate.py --make-baseline run1.json [run2.json ...] > docs/bench-baseline.json

A baseline made from several runs (of the same code, on different hosts or calls) keeps each row's
lowest ratio: the latency-bound rows (a few microseconds, where PyTorch's time is its host's
launch overhead) move by 10-20% between hosts, and a gate that fails on that says nothing about
our kernels.

Exit 1 when a row dropped too far or is missing from the new run, 0 otherwise.
"""
import argparse
import json
import sys


def ratios(path):
    with open(path) as f:
        rows = json.load(f)
    return {(r["op"], r["shape"]): r["ratio"] for r in rows if r.get("ratio") is not None}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+", help="REPORT BASELINE, or the reports for --make-baseline")
    ap.add_argument("--tolerance", type=float, default=0.10)
    ap.add_argument("--make-baseline", action="store_true")
    a = ap.parse_args()
    if a.make_baseline:
        lowest = {}
        for path in a.files:
            for key, q in ratios(path).items():
                lowest[key] = min(q, lowest.get(key, q))
        rows = [{"op": op, "shape": shape, "ratio": round(q, 3)} for (op, shape), q in lowest.items()]
        json.dump(rows, sys.stdout, indent=1)
        print()
        return 0
    if len(a.files) != 2:
        ap.error("the gate takes a report and a baseline")
    new, old = ratios(a.files[0]), ratios(a.files[1])
    failed = 0
    print(f"{'op':<16} {'shape':>16} {'baseline':>9} {'now':>7} {'change':>8}")
    for key in sorted(old):
        op, shape = key
        if key not in new:
            print(f"{op:<16} {shape:>16} {old[key]:>8.2f}x {'-':>7} {'MISSING':>8}")
            failed += 1
            continue
        change = new[key] / old[key] - 1.0
        bad = change < -a.tolerance
        failed += bad
        flag = "  DROPPED" if bad else ""
        print(f"{op:<16} {shape:>16} {old[key]:>8.2f}x {new[key]:>6.2f}x {change:>+7.1%}{flag}")
    verdict = "FAILED" if failed else "ok"
    print(f"ratio gate: {verdict}: {failed} of {len(old)} rows dropped more than {a.tolerance:.0%} or are missing")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
