"""PyTorch timings for the bench_report sizes that ../shared/baselines/torch_ref.py lacks,
measured the same way (its median_ms and inputs), so every row of the report has a ratio."""
import argparse, json
import torch
import torch_ref as ref

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    ref.G = torch.Generator(device=ref.dev).manual_seed(0)
    rows = []
    for n in [10_000]:
        x, y, o = ref.rn(n), ref.rn(n), torch.empty(n, device=ref.dev)
        ms = ref.median_ms(lambda: torch.add(x, y, out=o))
        rows.append(dict(workload="add", shape=str(n), impl="torch", ms=round(ms, 4), **{"GB/s": round(12 * n / ms / 1e6, 1)}))
    for shp in [(4096, 1024), (1 << 26,)]:
        x = ref.rn(*shp)
        ms = ref.median_ms(lambda: torch.tanh(x))
        rows.append(dict(workload="tanh", shape=str(shp), impl="torch", ms=round(ms, 4), **{"GB/s": round(8 * x.numel() / ms / 1e6, 1)}))
    for r in rows:
        print(f"{r['workload']:24s} {r['shape']:34s} {r['impl']:14s} {r['ms']:9.4f} ms  {r['GB/s']} GB/s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)

if __name__ == "__main__":
    main()
