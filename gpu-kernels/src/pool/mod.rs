//! 2-D pooling over NCHW planes: max (with its argmax) and average (count_include_pad), forward
//! and backward. Each op has a general kernel (one thread per output, or per input for the
//! backward gather) and a 2×2-stride-2 kernel for rows of a multiple of 4 floats (16-byte loads,
//! one thread per pair of outputs). The index arithmetic both ops share lives here.
pub mod avg;
pub mod max;

use crate::prelude::*;

/// The window geometry every general pooling kernel takes, in this order after its pointers.
#[derive(Clone, Copy)]
pub(crate) struct Window {
    pub h: usize,
    pub w: usize,
    pub oh: usize,
    pub ow: usize,
    pub kh: usize,
    pub kw: usize,
    pub sh: usize,
    pub sw: usize,
    pub ph: usize,
    pub pw: usize,
}

/// A window's valid input rows (or columns) `start..end`, and the offset `start - (o·s - pad)`
/// of the first of them inside the window.
#[derive(Clone, Copy)]
pub(crate) struct Span {
    pub start: usize,
    pub end: usize,
    pub offset: usize,
}

impl Window {
    /// `(plane, output row, output column)` of flat output index `o`.
    #[inline(always)]
    pub fn output_coords(&self, o: usize) -> (usize, usize, usize) {
        let (t, c) = (o / self.ow, o % self.ow);
        (t / self.oh, t % self.oh, c)
    }

    /// `(plane, input row, input column)` of flat input index `e`.
    #[inline(always)]
    pub fn input_coords(&self, e: usize) -> (usize, usize, usize) {
        let (t, j) = (e / self.w, e % self.w);
        (t / self.h, t % self.h, j)
    }

    /// The plane of flat output index `o`, and the valid rows and columns of its window.
    #[inline(always)]
    pub fn output_window(&self, o: usize) -> (usize, Span, Span) {
        let (plane, r, c) = self.output_coords(o);
        let rows = Self::valid(r, self.ph, self.kh, self.sh, self.h);
        (plane, rows, Self::valid(c, self.pw, self.kw, self.sw, self.w))
    }

    /// The output rows and columns whose windows contain input `(i, j)`, as `lo..hi` each.
    #[inline(always)]
    pub fn covering_outputs(&self, i: usize, j: usize) -> ((usize, usize), (usize, usize)) {
        let rows = Self::covering(i, self.ph, self.kh, self.sh, self.oh);
        (rows, Self::covering(j, self.pw, self.kw, self.sw, self.ow))
    }

    /// The output rows (or columns) whose windows contain input row `i`, as `lo..hi`.
    #[inline(always)]
    fn covering(i: usize, pad: usize, k: usize, s: usize, outputs: usize) -> (usize, usize) {
        let a = i + pad;
        let lo = if a + 1 < k { 0 } else { (a + 1 - k).div_ceil(s) };
        let hi = (a / s + 1).min(outputs);
        (lo, hi)
    }

    /// The valid input rows (or columns) of window `o` along one axis.
    #[inline(always)]
    fn valid(o: usize, pad: usize, k: usize, s: usize, size: usize) -> Span {
        let origin = o * s;
        let start = if origin < pad { 0 } else { origin - pad };
        let end = (origin + k - pad).min(size);
        Span { start, end, offset: start + pad - origin }
    }
}

/// One thread's work in the 2×2 stride-2 kernels (`w % 4 == 0`, `oh = h / 2`): a pair of
/// adjacent outputs and the 2×4 input block under them.
#[derive(Clone, Copy)]
pub(crate) struct Pair {
    /// Flat index of the block's top-left input.
    pub input: usize,
    /// Flat index of the pair's first output.
    pub output: usize,
    /// The pair lies on a plane's last output row and `h` is odd: the input row below it
    /// belongs to no window.
    pub above_odd_row: bool,
}

impl Pair {
    /// Pairs of outputs over `planes` planes of `h × w` inputs.
    #[inline(always)]
    pub fn count(planes: usize, h: usize, w: usize) -> usize {
        planes * (h / 2) * (w / 4)
    }

    /// Pair `q` of planes of `h × w` inputs.
    #[inline(always)]
    pub fn of(q: usize, h: usize, w: usize) -> Pair {
        let (oh, pairs) = (h / 2, w / 4);
        let (t, p) = (q / pairs, q % pairs);
        let (plane, r) = (t / oh, t % oh);
        Pair {
            input: (plane * h + 2 * r) * w + 4 * p,
            output: t * (w / 2) + 2 * p,
            above_odd_row: h % 2 == 1 && r + 1 == oh,
        }
    }

    /// The block's two input rows (16-byte loads).
    #[inline(always)]
    pub unsafe fn load_rows(&self, x: *const f32, w: usize) -> (F32x4, F32x4) {
        let top = x.add(self.input);
        (load_nc_f32x4(top), load_nc_f32x4(top.add(w)))
    }

    /// Writes the gradient's two block rows (16-byte stores), and zeros in the odd input row
    /// below the last output row, which no window reads.
    #[inline(always)]
    pub unsafe fn store_rows(&self, dx: *mut f32, w: usize, top: F32x4, bottom: F32x4) {
        let p = dx.add(self.input);
        store_f32x4(p, top);
        store_f32x4(p.add(w), bottom);
        if self.above_odd_row {
            store_f32x4(p.add(2 * w), F32x4([0.0; 4]));
        }
    }
}
