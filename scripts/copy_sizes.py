"""PyTorch's copy timed as one call between CUDA events (as torch_ref and
bench_report time every row), by size: what fraction of the large copy's rate a copy itself
reaches when the per-call cost is counted."""
import statistics, torch
def one(n, reps=300):
    x = torch.randn(n, device="cuda"); y = torch.empty_like(x)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(20): y.copy_(x)
    torch.cuda.synchronize(); t = []
    for _ in range(reps):
        s.record(); y.copy_(x); e.record(); e.synchronize(); t.append(s.elapsed_time(e))
    return statistics.median(t)
big = one(1 << 28, 50); rate = 8 * (1 << 28) / big / 1e6
print(f"copy 2^28 f32 (2 GiB moved): {big:.4f} ms, {rate:.0f} GB/s")
for n in [1 << 22, 1 << 23, 17 << 19, 1 << 24, 1 << 25, 1 << 26, 1 << 27]:
    ms = one(n); gbs = 8 * n / ms / 1e6
    print(f"copy {n:>10} f32 ({8 * n / 1e6:7.1f} MB moved): {ms:.4f} ms, {gbs:6.0f} GB/s, {100 * gbs / rate:5.1f}% of the 2^28 copy")
