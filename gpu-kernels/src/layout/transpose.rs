//! `transpose_f32`: `out[c, r] = x[r, c]` for a row-major `[rows, cols]` matrix, or for each of a
//! batch of them (`blockIdx.z`, matrices `rows·cols` apart in the input, `cols·pitch` in the
//! output), output rows `pitch` ≥ `rows` apart (TMA reads rows of 16-byte multiples: the 3xTF32
//! GEMM pads them); `transpose_split_f32` writes each value's TF32 rounding and its remainder to
//! two outputs, and `pad_split_f32` the same without the transpose.
//!
//! Floor: 4 B read and 4 B written per element; 4096² (128 MiB moved) at ~3.0 TB/s is ~45 µs.
//! A block moves one TILE×TILE tile: 16-byte loads along the input rows into shared memory, then
//! 16-byte stores along the output rows, each vector gathered from four tile rows. The tile lives
//! in dynamic shared memory, `TRANSPOSE_TILE_WORDS` floats (one padding column: at most 2-way
//! bank conflicts). Tiles that are partly outside the matrix, or matrices whose rows are not
//! 16-byte multiples, take a scalar path with bounds checks.
//! Launch: `blockDim = TRANSPOSE_BLOCK`, `gridDim = (⌈cols/TILE⌉, ⌈rows/TILE⌉, batch)`.
use crate::prelude::*;
use crate::shapes::{TRANSPOSE_BLOCK as BLOCK, TRANSPOSE_TILE as TILE};

const STRIDE: usize = TILE + 1;
const VECS_PER_ROW: usize = TILE / 4;
const STEPS: usize = TILE * VECS_PER_ROW / BLOCK;

#[no_mangle]
pub unsafe extern "ptx-kernel" fn transpose_f32(
    x: *const f32,
    rows: usize,
    cols: usize,
    pitch: usize,
    out: *mut f32,
) {
    grid_dependency_sync();
    transpose::<false>(x, (rows, cols, pitch), (out, core::ptr::null_mut()));
}

/// `transpose_f32` into two outputs: `hi[c, r]` = x[r, c] rounded to TF32, `lo[c, r]` = x[r, c] −
/// hi[c, r] (exact), the operands of a 3xTF32 product (`conv2d_fwd_wgmma_f32x3*`,
/// `gemm_wgmma_f32x3_nt`).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn transpose_split_f32(
    x: *const f32,
    rows: usize,
    cols: usize,
    pitch: usize,
    hi: *mut f32,
    lo: *mut f32,
) {
    grid_dependency_sync();
    transpose::<true>(x, (rows, cols, pitch), (hi, lo));
}

/// `hi[r, c]` = x[r, c] rounded to TF32 and `lo[r, c]` = x[r, c] − hi[r, c] for a row-major
/// `[rows, cols]` x, into rows `pitch` ≥ `cols` apart: the 3xTF32 GEMM's K-major operands whose
/// rows TMA cannot read in place. One value a thread along x; rows `gridDim.y` apart along y.
/// Launch: `gridDim = (⌈cols/blockDim.x⌉, any, 1)`.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn pad_split_f32(
    x: *const f32,
    rows: usize,
    cols: usize,
    pitch: usize,
    hi: *mut f32,
    lo: *mut f32,
) {
    grid_dependency_sync();
    let c = global_x();
    if c >= cols {
        return;
    }
    let mut r = block_y();
    while r < rows {
        let v = load_f32(x.add(r * cols + c));
        let h = round_tf32(v);
        store_f32(hi.add(r * pitch + c), h);
        store_f32(lo.add(r * pitch + c), v - h);
        r += grid_dim_y();
    }
}

/// The transpose of this block's tile into `out.0` (`SPLIT`: its TF32 roundings, and the
/// remainders into `out.1`).
#[inline(always)]
unsafe fn transpose<const SPLIT: bool>(
    x: *const f32,
    (rows, cols, pitch): (usize, usize, usize),
    out: (*mut f32, *mut f32),
) {
    let (x, out_offset) = (x.add(block_z() * rows * cols), block_z() * cols * pitch);
    let (out, lo) = (out.0.add(out_offset), out.1.wrapping_add(out_offset));
    let split = |v: f32| if SPLIT { round_tf32(v) } else { v };
    let tile = dynamic_shared::<f32>();
    let (col0, row0) = (block_x() * TILE, block_y() * TILE);
    let t = thread_x();
    let vector_path = pitch % 4 == 0 && cols % 4 == 0 && row0 + TILE <= rows && col0 + TILE <= cols;

    // In: tile row `r`, vector `v` of it (columns 4v..4v+4).
    for k in 0..STEPS {
        let (r, v) = ((t + k * BLOCK) / VECS_PER_ROW, (t + k * BLOCK) % VECS_PER_ROW);
        let src = x.add((row0 + r) * cols + col0 + 4 * v);
        let dst = tile.add(r * STRIDE + 4 * v);
        if vector_path {
            let F32x4(e) = load_f32x4(src);
            for (j, &val) in e.iter().enumerate() {
                *dst.add(j) = val;
            }
        } else {
            for j in 0..4 {
                if row0 + r < rows && col0 + 4 * v + j < cols {
                    *dst.add(j) = load_f32(src.add(j));
                }
            }
        }
    }
    sync_threads();
    // Out: output row `c` (= input column), vector `v` of it (input rows 4v..4v+4).
    for k in 0..STEPS {
        let (c, v) = ((t + k * BLOCK) / VECS_PER_ROW, (t + k * BLOCK) % VECS_PER_ROW);
        let dst = out.add((col0 + c) * pitch + row0 + 4 * v);
        let src = tile.add(4 * v * STRIDE + c);
        let low = lo.wrapping_add((col0 + c) * pitch + row0 + 4 * v);
        if vector_path {
            let e = [*src, *src.add(STRIDE), *src.add(2 * STRIDE), *src.add(3 * STRIDE)];
            store_f32x4(dst, F32x4(e.map(split)));
            if SPLIT {
                store_f32x4(low, F32x4(e.map(|v| v - split(v))));
            }
        } else {
            for j in 0..4 {
                if col0 + c < cols && row0 + 4 * v + j < rows {
                    let v = *src.add(j * STRIDE);
                    store_f32(dst.add(j), split(v));
                    if SPLIT {
                        store_f32(low.add(j), v - split(v));
                    }
                }
            }
        }
    }
}
