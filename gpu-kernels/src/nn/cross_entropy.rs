//! `cross_entropy_{f32,f16,bf16}` and `cross_entropy_narrow_{f32,f16,bf16}`: cross-entropy with
//! logits, the per-row loss and the gradient fused, for rows of any length; f32 rows that split
//! over a cluster (`RowPlan`'s `ROW_CLUSTER`) take `cross_entropy_cluster_f32` instead, the
//! softmax row machinery with the row held in registers.
//!
//! Floor: each logit read once and its gradient written once: 8 B per f32 element, 4 B per
//! 16-bit one (8192×50257 in f32: 3.3 GB, ~1.1 ms at the H100's ~3.0 TB/s copy rate). Per row r
//! with label c and max m: `loss[r] = ln Σ e^(x - m) + m - x[c]`,
//! `grad[r, i] = scale · (e^(x[i] - m) / Σ e^(x - m) - [i = c])` (`scale` = 1/rows, the mean).
//!
//! The statistics come from one pass (an online max and sum of exponentials, so no softmax
//! buffer for rows of any length). The gradient pass then reads the row again: its first vectors
//! from shared memory, as many as the host gave the block room for (the first pass keeps them
//! there), the rest from L2, last-read first (the likeliest still there). A row that room holds
//! whole (16-bit rows up to ~56K classes, f32 up to ~28K) comes in by `cp.async` first, every
//! vector of it in flight at once: loaded four vectors a thread a turn, a block waited for
//! memory four times a row (bf16 (8192, 50257): 80% of copy → 94-99%).
//! Rows fewer than the device holds blocks are cut into segments: a `ROW_PARTIAL` launch writes
//! each segment's (max, sum), a `ROW_APPLY` launch folds its row's in segment order and writes
//! its segment's gradient. Rows of at most `CE_NARROW_COLS` classes belong to a team of 1 to 32
//! lanes that holds the row in registers (at most 8 values a lane): one read. Every fold runs in
//! an order fixed by the launch shape: results are the same on every run. The gradient pass
//! stores `scale · softmax` for every value; then thread 0 of the block whose segment holds the
//! label writes the label's gradient over it and the row's loss, from the label's logit it read
//! before the block's first store: with the gradient written over the logits (in place), no
//! logit is read after its gradient was written.
use super::element::{Elem, F32};
use crate::prelude::*;
use crate::shapes::{CE_UNROLL as UNROLL, ROW_APPLY, ROW_CLUSTER, ROW_PARTIAL, ROW_WHOLE};

const _: () = assert!(UNROLL == 4);

/// An online (max, Σ e^(x - max)).
#[derive(Clone, Copy)]
struct MaxSum {
    max: f32,
    sum: f32,
}

impl MaxSum {
    const EMPTY: Self = MaxSum { max: f32::NEG_INFINITY, sum: 0.0 };

    /// Fold in values whose max is `m`; `values` yields them.
    #[inline(always)]
    fn add(&mut self, m: f32, values: impl FnOnce(&mut f32, f32)) {
        if m > self.max {
            self.sum *= exp_fast(self.max - m);
            self.max = m;
        }
        // Only -inf seen so far: nothing to add (and -inf - -inf would be NaN).
        if self.max != f32::NEG_INFINITY {
            values(&mut self.sum, self.max);
        }
    }

    #[inline(always)]
    fn merge(self, o: MaxSum) -> MaxSum {
        let max = Max::combine(self.max, o.max);
        if max == f32::NEG_INFINITY {
            return self;
        }
        MaxSum { max, sum: self.sum * exp_fast(self.max - max) + o.sum * exp_fast(o.max - max) }
    }
}

/// The block's fold of every thread's pair (every thread gets it; holds barriers).
#[inline(always)]
fn block_merge(st: MaxSum) -> MaxSum {
    let max = block_reduce::<Max>(st.max);
    let scaled = if st.sum == 0.0 { 0.0 } else { st.sum * exp_fast(st.max - max) };
    MaxSum { max, sum: block_reduce::<Sum>(scaled) }
}

/// The fold over a team of `lanes` (a power of two dividing 32) consecutive lanes; every lane of
/// the warp takes part.
#[inline(always)]
fn team_merge(mut st: MaxSum, lanes: usize) -> MaxSum {
    let mut m = lanes / 2;
    while m > 0 {
        st = st.merge(MaxSum { max: shfl_xor(st.max, m as u32), sum: shfl_xor(st.sum, m as u32) });
        m /= 2;
    }
    st
}

/// Elements `[a, b)` of the logits: the aligned 16-byte vectors `[vs, vs + nv)` (in vector
/// units from the buffer's start) and fewer than `2 · VEC` scalars around them.
struct Segment {
    a: usize,
    b: usize,
    vs: usize,
    nv: usize,
    vec: usize,
}

impl Segment {
    #[inline(always)]
    fn new(a: usize, b: usize, vec: usize) -> Self {
        let (vs, ve) = (a.div_ceil(vec), b / vec);
        Segment { a, b, vs, nv: ve.saturating_sub(vs), vec }
    }
    #[inline(always)]
    fn head(&self) -> usize {
        if self.nv == 0 {
            self.b - self.a
        } else {
            self.vs * self.vec - self.a
        }
    }
    #[inline(always)]
    fn scalars(&self) -> usize {
        if self.nv == 0 {
            self.b - self.a
        } else {
            self.head() + self.b - (self.vs + self.nv) * self.vec
        }
    }
    /// Whether element `i` is the segment's.
    #[inline(always)]
    fn holds(&self, i: usize) -> bool {
        self.a <= i && i < self.b
    }
    /// The element index of the `k`-th scalar.
    #[inline(always)]
    fn scalar(&self, k: usize) -> usize {
        if k < self.head() {
            self.a + k
        } else {
            (self.vs + self.nv) * self.vec + k - self.head()
        }
    }
}

/// This thread's (max, sum) over its share of the segment; the segment's first `cached` vectors
/// also go to `cache` (shared memory), or, `PRELOADED`, are read from there (all of them).
#[inline(always)]
unsafe fn segment_stats<E: Elem, const PRELOADED: bool>(
    x: *const E::Bits,
    seg: &Segment,
    cache: *mut E::Vector,
    cached: usize,
) -> MaxSum {
    let (t, nt) = (thread_x(), block_dim_x());
    let mut st = MaxSum::EMPTY;
    if t < seg.scalars() {
        let v = E::load(x.add(seg.scalar(t)));
        st.add(v, |s, m| *s += exp_fast(v - m));
    }
    let mut u = t;
    while u < seg.nv {
        let mut raw = [E::pack([0.0; 8]); UNROLL];
        let mut m = f32::NEG_INFINITY;
        unroll!(j in [0, 1, 2, 3] => {
            let uj = u + j * nt;
            if uj < seg.nv && PRELOADED {
                raw[j] = *cache.add(uj);
            } else if uj < seg.nv {
                raw[j] = E::load_vector(x.add((seg.vs + uj) * E::VEC));
                if uj < cached {
                    *cache.add(uj) = raw[j];
                }
            }
        });
        unroll!(j in [0, 1, 2, 3] => {
            if u + j * nt < seg.nv {
                let v = E::unpack(raw[j]);
                for k in 0..E::VEC {
                    m = Max::combine(m, v[k]);
                }
            }
        });
        st.add(m, |s, m| {
            let e = ExpBelow::new(m);
            unroll!(j in [0, 1, 2, 3] => {
                if u + j * nt < seg.nv {
                    let v = E::unpack(raw[j]);
                    for k in 0..E::VEC {
                        *s += e.at(v[k]);
                    }
                }
            });
        });
        u += UNROLL * nt;
    }
    st
}

/// The gradient of `x`'s row statistics `st` over this thread's share of the segment (vectors
/// in reverse order, the first `cached` from `cache`), as if no value were the label's:
/// `scale · softmax`. The label's own gradient and the row's loss come after, from
/// [`label_gradient`] (a test of every value's index against the label's, and the branch to the
/// loss's store in each, took as long as the rest of the pass).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn segment_gradient<E: Elem>(
    x: *const E::Bits,
    grad: *mut E::Bits,
    seg: &Segment,
    cache: *const E::Vector,
    cached: usize,
    st: MaxSum,
    scale: f32,
) {
    let (t, nt) = (thread_x(), block_dim_x());
    let (factor, e) = (scale / st.sum, ExpBelow::new(st.max));
    let g = |v: f32| e.at(v) * factor;
    let mut k = t;
    while k < seg.nv {
        let mut raw = [E::pack([0.0; 8]); UNROLL];
        unroll!(j in [0, 1, 2, 3] => {
            let kj = k + j * nt;
            if kj < seg.nv {
                let u = seg.nv - 1 - kj;
                raw[j] = if u < cached { *cache.add(u) } else { E::load_vector(x.add((seg.vs + u) * E::VEC)) };
            }
        });
        unroll!(j in [0, 1, 2, 3] => {
            let kj = k + j * nt;
            if kj < seg.nv {
                let base = (seg.vs + seg.nv - 1 - kj) * E::VEC;
                E::store_vector(grad.add(base), E::pack(E::unpack(raw[j]).map(g)));
            }
        });
        k += UNROLL * nt;
    }
    if t < seg.scalars() {
        let i = seg.scalar(t);
        E::store(grad.add(i), g(E::load(x.add(i))));
    }
}

/// After [`segment_gradient`] and a barrier: thread 0 of the block whose segment holds the
/// label (at `label_at`, its logit `x_label`, read before any gradient of the row was written)
/// writes the label's gradient over the one stored there, and the row's `*loss`.
#[inline(always)]
unsafe fn label_gradient<E: Elem>(
    grad: *mut E::Bits,
    seg: &Segment,
    (label_at, x_label): (usize, f32),
    st: MaxSum,
    scale: f32,
    loss: *mut f32,
) {
    if thread_x() == 0 && seg.holds(label_at) {
        E::store(grad.add(label_at), scale * (exp_fast(x_label - st.max) / st.sum - 1.0));
        *loss = ln_fast(st.sum) + st.max - x_label;
    }
}

/// One block per (row, segment) of `[rows, cols]`, `segments` per row of `seg_len` elements
/// (the last may be shorter); `phase` one of `ROW_WHOLE` (one segment), `ROW_PARTIAL`, `ROW_APPLY`.
/// `partials` holds two floats per block for the two-phase form; `cached` (whole rows only; 0
/// otherwise) is how many of the row's first vectors the launch's dynamic shared memory holds.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn cross_entropy_rows<E: Elem>(
    logits: *const E::Bits,
    labels: *const u32,
    partials: *mut f32,
    loss: *mut f32,
    grad: *mut E::Bits,
    cols: usize,
    seg_len: usize,
    segments: usize,
    scale: f32,
    phase: u32,
    cached: u32,
) {
    let (row, s) = (block_x() / segments, block_x() % segments);
    let a = row * cols + s * seg_len;
    let seg = Segment::new(a, (a + seg_len).min((row + 1) * cols), E::VEC);
    let label_at = row * cols + *labels.add(row) as usize;
    let loss = loss.add(row);
    // The label's logit, read before the barrier that precedes the block's first gradient store.
    let x_label = if thread_x() == 0 && seg.holds(label_at) { E::load(logits.add(label_at)) } else { 0.0 };
    if phase == ROW_APPLY {
        let mut st = MaxSum::EMPTY;
        for j in 0..segments {
            let p = partials.add(2 * (row * segments + j));
            st = st.merge(MaxSum { max: load_f32(p), sum: load_f32(p.add(1)) });
        }
        sync_threads();
        segment_gradient::<E>(logits, grad, &seg, core::ptr::null(), 0, st, scale);
        sync_threads();
        label_gradient::<E>(grad, &seg, (label_at, x_label), st, scale, loss);
        return;
    }
    let (cache, cached) = (dynamic_shared::<E::Vector>(), cached as usize);
    // A row the cache holds whole comes in by `cp.async`, every vector in flight at once, rather
    // than four a thread at a time.
    let st = if cached >= seg.nv {
        let (t, nt, dst) = (thread_x(), block_dim_x(), shared_addr(cache));
        let mut u = t;
        while u < seg.nv {
            cp_async_16(dst + 16 * u as u32, logits.add((seg.vs + u) * E::VEC) as *const f32, 16);
            u += nt;
        }
        cp_async_commit();
        cp_async_wait::<0>();
        sync_threads();
        block_merge(segment_stats::<E, true>(logits, &seg, cache, cached))
    } else {
        block_merge(segment_stats::<E, false>(logits, &seg, cache, cached))
    };
    if phase == ROW_PARTIAL {
        if thread_x() == 0 {
            store_f32x2(partials.add(2 * block_x()), [st.max, st.sum]);
        }
        return;
    }
    segment_gradient::<E>(logits, grad, &seg, cache, cached, st, scale);
    sync_threads();
    label_gradient::<E>(grad, &seg, (label_at, x_label), st, scale, loss);
}

/// Rows of `[rows, cols]` owned by teams of `lanes` (a power of two up to 32, with
/// `8 · lanes ≥ cols`): each lane loads its at most 8 values of the row (strided by `lanes`,
/// coalesced across the team) into registers once, and writes their gradients from there.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn cross_entropy_narrow<E: Elem>(
    logits: *const E::Bits,
    labels: *const u32,
    loss: *mut f32,
    grad: *mut E::Bits,
    rows: usize,
    cols: usize,
    lanes: usize,
    scale: f32,
) {
    let (team, l) = (thread_x() / lanes, thread_x() % lanes);
    let row = block_x() * (block_dim_x() / lanes) + team;
    let live = row < rows;
    let (x, g) = (logits.wrapping_add(row * cols), grad.wrapping_add(row * cols));
    let mut v = [f32::NEG_INFINITY; 8];
    let mut m = f32::NEG_INFINITY;
    unroll!(k in [0, 1, 2, 3, 4, 5, 6, 7] => {
        if live && l + k * lanes < cols {
            v[k] = E::load(x.add(l + k * lanes));
            m = Max::combine(m, v[k]);
        }
    });
    let mut st = MaxSum::EMPTY;
    st.add(m, |s, m| {
        unroll!(k in [0, 1, 2, 3, 4, 5, 6, 7] => {
            if l + k * lanes < cols {
                *s += exp_fast(v[k] - m);
            }
        });
    });
    // Every lane of the warp takes part, live or not.
    let st = team_merge(st, lanes);
    if !live {
        return;
    }
    let label = *labels.add(row) as usize;
    let (inv, lse) = (1.0 / st.sum, ln_fast(st.sum) + st.max);
    unroll!(k in [0, 1, 2, 3, 4, 5, 6, 7] => {
        let j = l + k * lanes;
        if j < cols {
            let p = exp_fast(v[k] - st.max) * inv;
            let d = if j == label {
                *loss.add(row) = lse - v[k];
                p - 1.0
            } else {
                p
            };
            E::store(g.add(j), scale * d);
        }
    });
}

/// Rows split over a cluster, as softmax's (`ROW_CLUSTER`, `prelude::rows`): each block holds its
/// chunk of the row in registers, the cluster merges the chunks' (max, Σ e^(x - max)) in rank
/// order, then each block writes its chunk's `scale · softmax`, and thread 0 of the block whose
/// chunk holds the label, after a barrier, the label's gradient and the row's loss, from the
/// label's logit it read before the merge (a test of every value's column against the label
/// cost as much as the rest of the kernel). One read of each logit (and the label's twice);
/// `grad` may be the logits: a block writes only its own chunk, after the merge that follows
/// every read of it.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn cross_entropy_cluster_rows<F: Float>(
    logits: *const F::Raw,
    labels: *const u32,
    loss: *mut f32,
    grad: *mut F::Raw,
    (rows, cols, team, chunk): (usize, usize, usize, usize),
    scale: f32,
) {
    row_items::<F, SLOTS>(
        (rows, cols, team, chunk),
        ROW_CLUSTER,
        #[inline(always)]
        |t, mode| {
            let offset = t.row * cols;
            let v = t.load_first::<F, SLOTS>(logits.wrapping_add(offset), f32::NEG_INFINITY);
            let label = *labels.add(t.row) as usize;
            let holder = t.lane == 0 && t.begin <= label && label < t.end;
            let x_label = if holder { F::load(logits.add(offset + label)) } else { 0.0 };
            let Some(MaxSumExp(m, s)) =
                t.row_stat(mode, core::ptr::null_mut(), || max_sum_exp::<SLOTS>(&t, &v))
            else {
                return;
            };
            let inv = scale / s;
            t.store_first::<F, SLOTS>(
                grad.wrapping_add(offset),
                #[inline(always)]
                |k| v[k].map(|e| exp_fast(e - m) * inv),
            );
            // The label's gradient over the one just stored there (by whichever thread holds it).
            sync_threads();
            if holder {
                F::store(grad.add(offset + label), scale * (exp_fast(x_label - m) / s - 1.0));
                *loss.add(t.row) = ln_fast(s) + m - x_label;
            }
        },
    );
}

macro_rules! cross_entropy_kernels {
    ($($rows:ident, $narrow:ident: $e:ty, $bits:ty;)*) => {$(
        /// Rows (or row segments) of more than `CE_NARROW_COLS` classes; see the module
        /// documentation.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $rows(
            logits: *const $bits,
            labels: *const u32,
            partials: *mut f32,
            loss: *mut f32,
            grad: *mut $bits,
            cols: usize,
            seg_len: usize,
            segments: usize,
            scale: f32,
            phase: u32,
            cached: u32,
        ) {
            grid_dependency_sync();
            cross_entropy_rows::<$e>(logits, labels, partials, loss, grad, cols, seg_len, segments, scale, phase, cached)
        }
        /// Rows of at most `CE_NARROW_COLS` classes, a team of lanes each.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $narrow(
            logits: *const $bits,
            labels: *const u32,
            loss: *mut f32,
            grad: *mut $bits,
            rows: usize,
            cols: usize,
            lanes: usize,
            scale: f32,
        ) {
            grid_dependency_sync();
            cross_entropy_narrow::<$e>(logits, labels, loss, grad, rows, cols, lanes, scale)
        }
    )*};
}

cross_entropy_kernels! {
    cross_entropy_f32, cross_entropy_narrow_f32: F32, f32;
    cross_entropy_f16, cross_entropy_narrow_f16: F16, u16;
    cross_entropy_bf16, cross_entropy_narrow_bf16: BF16, u16;
}

/// f32 rows split over a cluster; see `cross_entropy_cluster_rows`. Launch: as a `ROW_CLUSTER`
/// row op (`host/src/ops/rows.rs`). 16-bit logits keep the kernels above: in clusters their
/// unaligned rows load 2 bytes a lane, and (8192, 50257) bf16 took 1.40 ms against 0.75.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn cross_entropy_cluster_f32(
    logits: *const f32,
    labels: *const u32,
    loss: *mut f32,
    grad: *mut f32,
    rows: usize,
    cols: usize,
    team: usize,
    chunk: usize,
    scale: f32,
) {
    grid_dependency_sync();
    cross_entropy_cluster_rows::<f32>(logits, labels, loss, grad, (rows, cols, team, chunk), scale)
}
