"""Interop check for tests/checkpoint.rs: Python's safetensors (with PyTorch) against ferrocuda's.

    python3 safetensors_interop.py check FILE   # FILE written by ferrocuda: every tensor must hold
                                                # pattern(name) in its dtype, bit for bit
    python3 safetensors_interop.py write FILE RAW
                                                # FILE for ferrocuda to load, and RAW: each
                                                # tensor's bytes, concatenated in name order

pattern(n, i) = sin(0.37 i + n) * (1 + i % 7) in f64, rounded to f32 and then to the dtype; n =
the number after the last "_" of the name.
"""
import sys
import torch
from safetensors.torch import load_file, save_file

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def pattern(name, numel):
    n = float(name.rsplit("_", 1)[1])
    i = torch.arange(numel, dtype=torch.float64)
    return torch.sin(0.37 * i + n) * (1 + i % 7)


def check(path):
    tensors = load_file(path)
    assert tensors, "no tensors"
    for name, t in sorted(tensors.items()):
        kind = name.split("_")[0]
        assert t.dtype == DTYPES[kind], (name, t.dtype)
        want = pattern(name, t.numel()).to(torch.float32).to(DTYPES[kind]).reshape(t.shape)
        assert torch.equal(t.view(torch.int16 if t.element_size() == 2 else torch.int32),
                           want.view(torch.int16 if t.element_size() == 2 else torch.int32)), name
        print(f"{name}: {tuple(t.shape)} {t.dtype} identical")


def write(path, raw):
    g = torch.Generator().manual_seed(5)
    tensors = {
        "f32_a": torch.randn(3, 17, generator=g),
        "bf16_b": torch.randn(31, generator=g).to(torch.bfloat16),
        "f16_c": torch.randn(2, 3, 5, generator=g).to(torch.float16),
    }
    save_file(tensors, path, metadata={"written_by": "torch " + torch.__version__})
    with open(raw, "wb") as f:
        for name in sorted(tensors):
            f.write(tensors[name].contiguous().view(torch.uint8).numpy().tobytes())
    print(f"wrote {path} and {raw}")


if __name__ == "__main__":
    {"check": lambda: check(sys.argv[2]), "write": lambda: write(sys.argv[2], sys.argv[3])}[sys.argv[1]]()
