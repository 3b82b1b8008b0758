//! `conv2d_shift_rows_f32`: for each shift b of the set `shifts` (bit b, b = 1, 2, 3), one copy of x
//! whose rows start 4 − b columns later: `out[j, row, v] = x[row, v − 4 + b]` where that lies in
//! `[0, width)`, else 0, for `v` in `[0, pitch)` (copy j is the j-th shift of the set, in
//! increasing order). For the `wgmma` weight gradient (`conv2d_bwd_weight_wgmma_tf32*`): TMA
//! starts a box only at a 16-byte boundary of a row, and a tap shifts x's columns by
//! `s·dilation − padding`, which need not be a multiple of 4; the kernel reads a shift of 4a + b
//! from copy b at column 4(a + 1), with zeros where the copy's columns lie outside x's row (the
//! padding), as TMA gives outside the tensor.
//!
//! Floor: x read once and each copy written once (`pitch / width` of x's bytes each).
//! Launch: grid-stride over the `rows · pitch / 4` 16-byte vectors of a copy,
//! `ELEMENTWISE_BLOCK` threads; `pitch` is a multiple of 4.
use crate::prelude::*;

#[no_mangle]
pub unsafe extern "ptx-kernel" fn conv2d_shift_rows_f32(
    x: *const f32,
    out: *mut f32,
    rows: usize,
    width: usize,
    pitch: usize,
    shifts: u32,
) {
    let vectors = pitch / 4;
    let copy_len = rows * pitch;
    for i in grid_stride(rows * vectors) {
        let (row, v0) = (i / vectors, 4 * (i % vectors));
        let source = x.add(row * width);
        // Columns v0 − 3 ..= v0 + 2 of x: every value the three shifts' vectors take.
        let mut window = [0.0f32; 7];
        unroll!(j in [1, 2, 3, 4, 5, 6] => {
            // As an unsigned test of [0, width): v0 − 4 + j.
            let column = (v0 + j).wrapping_sub(4);
            if column < width {
                window[j] = load_nc_f32(source.add(column));
            }
        });
        let mut copy = out.add(row * pitch + v0);
        unroll!(b in [1, 2, 3] => {
            if shifts & (1 << b) != 0 {
                store_f32x4(copy, F32x4([window[b], window[b + 1], window[b + 2], window[b + 3]]));
                copy = copy.add(copy_len);
            }
        });
    }
}
