//! 2-D pooling over NCHW planes: max (with its argmax) and average (count_include_pad), forward
//! and backward. Each op has a general kernel (one thread per output, or per input for the
//! backward gather) and a 2×2-stride-2 kernel for rows of a multiple of 4 floats (16-byte loads,
//! one thread per pair of outputs).
pub mod avg;
pub mod max;

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

impl Window {
    /// `(plane, output row, output column)` of flat output index `o`.
    #[inline(always)]
    pub fn output_coords(&self, o: usize) -> (usize, usize, usize) {
        let (t, c) = (o / self.ow, o % self.ow);
        (t / self.oh, t % self.oh, c)
    }

    /// The output rows (or columns) whose windows contain input row `i`, as `lo..hi`.
    #[inline(always)]
    pub fn covering(i: usize, pad: usize, k: usize, s: usize, outputs: usize) -> (usize, usize) {
        let a = i + pad;
        let lo = if a + 1 < k { 0 } else { (a + 1 - k).div_ceil(s) };
        let hi = (a / s + 1).min(outputs);
        (lo, hi)
    }

    /// The input rows (or columns) of window `o`'s valid part, as `start..end`, and the window's
    /// offset `start - (o·s - pad)` of its first valid element.
    #[inline(always)]
    pub fn valid(o: usize, pad: usize, k: usize, s: usize, size: usize) -> (usize, usize, usize) {
        let origin = o * s;
        let start = if origin < pad { 0 } else { origin - pad };
        let end = (origin + k - pad).min(size);
        (start, end, start + pad - origin)
    }
}
