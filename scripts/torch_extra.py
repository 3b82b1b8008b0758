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
    # Rows wider than a block holds, many of them (a language model's logits): split rows.
    import torch.nn.functional as F
    for shp in [(4096, 50257)]:
        x, w, b = ref.rn(*shp), ref.rn(shp[1]), ref.rn(shp[1])
        for name, fn, per in [("sum_rows", lambda: x.sum(1), 4), ("softmax", lambda: torch.softmax(x, 1), 8),
                              ("layernorm", lambda: F.layer_norm(x, (shp[1],), w, b), 8)]:
            ms = ref.median_ms(fn)
            rows.append(dict(workload=name, shape=str(shp), impl="torch", ms=round(ms, 4), **{"GB/s": round(per * x.numel() / ms / 1e6, 1)}))
    for r in rows:
        print(f"{r['workload']:24s} {r['shape']:34s} {r['impl']:14s} {r['ms']:9.4f} ms  {r['GB/s']} GB/s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)

if __name__ == "__main__":
    main()
