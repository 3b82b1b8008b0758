//! `pad_rows_b16`: a row-major `[rows, cols]` matrix of 16-bit values (any 2-byte alignment, any
//! `cols`) copied into rows `pitch` apart (a multiple of 8 ≥ `cols`, 16-byte aligned), zeros
//! after each row's `cols` values: the operands TMA cannot read in place (GEMM dispatch row 3).
//! The driver's 2-D copy moves such odd-pitch rows at ~0.3-0.4 TB/s.
//!
//! Floor: 2 B read and 2 B written per value. Each thread writes 16-byte vectors of the output
//! (8 values), walking the padded matrix as one flat run of vectors, so that thin rows (73
//! values: 10 vectors) keep every lane busy; it reads the 8 values as scalars (the input rows
//! start at any 2-byte boundary), which a warp's neighbouring lanes share in L1.
//! Launch: 1-D, any grid (grid-stride).
use crate::prelude::*;

#[no_mangle]
pub unsafe extern "ptx-kernel" fn pad_rows_b16(
    x: *const u16,
    rows: usize,
    cols: usize,
    pitch: usize,
    out: *mut u16,
) {
    grid_dependency_sync();
    let per_row = pitch / 8;
    for v in grid_stride(rows * per_row) {
        let (r, c0) = (v / per_row, v % per_row * 8);
        let src = x.add(r * cols);
        let mut vals = [0u16; 8];
        unroll!(e in [0, 1, 2, 3, 4, 5, 6, 7] => {
            if c0 + e < cols {
                vals[e] = load_u16(src.add(c0 + e));
            }
        });
        store_u16x8(out.add(r * pitch + c0), U16x8(vals));
    }
}
