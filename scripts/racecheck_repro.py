"""compute-sanitizer racecheck's "Internal Sanitizer Error: Detected a failure to track a kernel
launch", without ferrocuda: 4 host threads, 3 streams (two threads share one), 25 launches of a
one-line kernel each, through the driver API (ctypes; needs only libcuda and an sm_90 GPU).

    compute-sanitizer --tool racecheck python3 scripts/racecheck_repro.py
    compute-sanitizer --tool racecheck --force-blocking-launches python3 scripts/racecheck_repro.py

The first reports the internal error in some runs (0 hazards either way); the second never did
(docs/perf-notes.md, Sanitizers).
"""
import ctypes as C
import threading

cuda = C.CDLL("libcuda.so.1")
PTX = b"""
.version 8.0
.target sm_90
.address_size 64
.visible .entry twice(.param .u64 x, .param .u64 y, .param .u64 n)
{
  .reg .pred p;
  .reg .b32 r<4>;
  .reg .b64 rd<8>;
  .reg .f32 f<3>;
  ld.param.u64 rd1, [x];
  ld.param.u64 rd2, [y];
  ld.param.u64 rd3, [n];
  mov.u32 r1, %ctaid.x;
  mov.u32 r2, %ntid.x;
  mov.u32 r3, %tid.x;
  mul.wide.u32 rd4, r1, r2;
  cvt.u64.u32 rd5, r3;
  add.u64 rd4, rd4, rd5;
  setp.ge.u64 p, rd4, rd3;
  @p bra DONE;
  shl.b64 rd5, rd4, 2;
  add.u64 rd6, rd1, rd5;
  add.u64 rd7, rd2, rd5;
  ld.global.f32 f1, [rd6];
  add.f32 f2, f1, f1;
  st.global.f32 [rd7], f2;
DONE:
  ret;
}
"""


def call(name, *args):
    r = getattr(cuda, name)(*args)
    if r != 0:
        raise RuntimeError(f"{name} failed with CUresult {r}")


call("cuInit", 0)
dev, ctx, mod, fn = C.c_int(), C.c_void_p(), C.c_void_p(), C.c_void_p()
call("cuDeviceGet", C.byref(dev), 0)
call("cuDevicePrimaryCtxRetain", C.byref(ctx), dev)
call("cuCtxSetCurrent", ctx)
call("cuModuleLoadData", C.byref(mod), C.c_char_p(PTX))
call("cuModuleGetFunction", C.byref(fn), mod, b"twice")
streams = []
for _ in range(3):
    s = C.c_void_p()
    call("cuStreamCreate", C.byref(s), 1)
    streams.append(s)
streams = [streams[0], streams[0], streams[1], streams[2]]
N = 1000
barrier = threading.Barrier(4)


def work(t):
    call("cuCtxSetCurrent", ctx)
    x, y = C.c_uint64(), C.c_uint64()
    call("cuMemAlloc_v2", C.byref(x), C.c_size_t(4 * N))
    call("cuMemAlloc_v2", C.byref(y), C.c_size_t(4 * N))
    n = C.c_uint64(N)
    args = (C.c_void_p * 3)(*[C.cast(C.byref(v), C.c_void_p) for v in (x, y, n)])
    barrier.wait()
    for _ in range(25):
        call("cuLaunchKernel", fn, 4, 1, 1, 256, 1, 1, 0, streams[t], args, None)
    call("cuStreamSynchronize", streams[t])


threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
for th in threads:
    th.start()
for th in threads:
    th.join()
print("done: 100 launches from 4 threads on 3 streams")
