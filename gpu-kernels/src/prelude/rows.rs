//! Row teams: the threads that share one row of a `[rows, cols]` tensor (or one chunk of a row
//! split across blocks), the up to 32 values each thread holds of it in registers, and the
//! team-wide combination of per-thread statistics.
//!
//! A team is `size` threads of a 1-D block: a power of two up to 32 (several rows per warp, or a
//! warp per row; combined by butterflies within the warp) or the whole block (one row, or one
//! chunk of a row, per block of 64-256 threads; combined through shared memory). `blockIdx.y`
//! picks the chunk `[c·chunk, (c+1)·chunk)` of the row. Each thread holds up to [`SLOTS`] chunks of 8 values (kernels are built for the
//! first 1, 2 or 4: `load_first`, `each_first`, `store_first`): 16-byte vectors (one of 8 16-bit
//! values, two of 4 f32) with the team's lanes on consecutive vectors, so that each load
//! instruction of a warp reads one contiguous span, where the row start is 16-byte aligned;
//! scalars at `begin + lane + size·(8k + e)` where it is not. The host keeps a team's range
//! within `8 · K · size` values. A `ROW_CLUSTER` launch turns the grid around: `blockIdx.y` is
//! the row and `blockIdx.x` the chunk, so that a row's chunks are one cluster along x.
use super::block::{welford_combine, Max, ReduceOp, Sum};
use super::half::{HalfFloat, BF16, F16};
use super::index::{block_dim_x, block_x, block_y, grid_dim_x, grid_dim_y, lane, thread_x, warp_in_block};
use super::math::{exp_fast, rcp_approx};
use super::memory::*;
use super::shared::shared_ptr;
use super::sync::sync_threads;
#[cfg(any(feature = "sm90a", target_feature = "sm_90"))]
use super::sync::{cluster_sync, load_cluster_shared_f32};
use super::tensor_core::shared_addr;
use super::warp::{shfl_xor, warp_reduce};
use crate::shapes::{NN_ROW_BLOCK, ROW_APPLY, ROW_CLUSTER, ROW_PARTIAL, ROW_WHOLE};
use core::marker::PhantomData;

/// Chunks of 8 values each thread of a team holds.
pub const SLOTS: usize = 4;

/// A thread's share of a row: `SLOTS` chunks of 8 values, as f32.
pub type Slots = [[f32; 8]; SLOTS];

/// A tensor element format: loaded as f32, stored rounded from f32 (to nearest even).
pub trait Float {
    /// The bits a kernel's pointer points to (`f32`, or `u16` for the 16-bit formats).
    type Raw: Copy;
    /// Values per 16 bytes: a row start that is a multiple of this is 16-byte aligned.
    const PER_16B: usize;
    /// # Safety
    /// `p` is readable global memory that nothing writes during the kernel.
    unsafe fn load(p: *const Self::Raw) -> f32;
    /// One 16-byte vector (`PER_16B` values) into the first entries.
    ///
    /// # Safety
    /// As [`Float::load`], 16-byte aligned.
    unsafe fn load_vec(p: *const Self::Raw) -> [f32; 8];
    /// # Safety
    /// `p` is writable global memory.
    unsafe fn store(p: *mut Self::Raw, v: f32);
    /// The first `PER_16B` entries as one 16-byte vector.
    ///
    /// # Safety
    /// As [`Float::store`], 16-byte aligned.
    unsafe fn store_vec(p: *mut Self::Raw, v: [f32; 8]);

    /// 8 values: from `p`, and (f32, 4 per vector) the second four from `p + second`.
    ///
    /// # Safety
    /// As [`Float::load_vec`] at both addresses.
    #[inline(always)]
    unsafe fn load8(p: *const Self::Raw, second: usize) -> [f32; 8] {
        Self::widen8(Self::load8_raw(p, second))
    }
    /// [`Float::load8`]'s bits, not yet converted: kernels issue every load of a step first and
    /// convert after, so that a warp waits for memory once per step rather than once per load.
    ///
    /// # Safety
    /// As [`Float::load8`].
    unsafe fn load8_raw(p: *const Self::Raw, second: usize) -> [u32; 8];
    /// The values of [`Float::load8_raw`]'s bits.
    fn widen8(raw: [u32; 8]) -> [f32; 8];
    /// One 16-byte vector's bits (`PER_16B` values), not yet converted ([`Float::widen_vec`]).
    ///
    /// # Safety
    /// As [`Float::load_vec`].
    #[inline(always)]
    unsafe fn load_vec_raw(p: *const Self::Raw) -> [u32; 4] {
        load_u32x4(p as *const u32)
    }
    /// The values of [`Float::load_vec_raw`]'s bits, in the first `PER_16B` entries.
    #[inline(always)]
    fn widen_vec(raw: [u32; 4]) -> [f32; 8] {
        Self::widen8([raw[0], raw[1], raw[2], raw[3], 0, 0, 0, 0])
    }
    /// The store of [`Float::load8`]'s layout.
    ///
    /// # Safety
    /// As [`Float::store_vec`] at both addresses.
    #[inline(always)]
    unsafe fn store8(p: *mut Self::Raw, second: usize, v: [f32; 8]) {
        Self::store_vec(p, v);
        if Self::PER_16B == 4 {
            Self::store_vec(p.add(second), [v[4], v[5], v[6], v[7], 0.0, 0.0, 0.0, 0.0]);
        }
    }
}

impl Float for f32 {
    type Raw = f32;
    const PER_16B: usize = 4;
    #[inline(always)]
    unsafe fn load(p: *const f32) -> f32 {
        load_f32(p)
    }
    #[inline(always)]
    unsafe fn load_vec(p: *const f32) -> [f32; 8] {
        let a = load_f32x4(p).0;
        [a[0], a[1], a[2], a[3], 0.0, 0.0, 0.0, 0.0]
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: f32) {
        store_f32(p, v)
    }
    #[inline(always)]
    unsafe fn store_vec(p: *mut f32, v: [f32; 8]) {
        store_f32x4(p, F32x4([v[0], v[1], v[2], v[3]]));
    }
    #[inline(always)]
    unsafe fn load8_raw(p: *const f32, second: usize) -> [u32; 8] {
        let (a, b) = (load_f32x4(p).0, load_f32x4(p.add(second)).0);
        [a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]].map(f32::to_bits)
    }
    #[inline(always)]
    fn widen8(raw: [u32; 8]) -> [f32; 8] {
        raw.map(f32::from_bits)
    }
}

macro_rules! half_float {
    ($($h:ty),*) => {$(
        impl Float for $h {
            type Raw = u16;
            const PER_16B: usize = 8;
            #[inline(always)]
            unsafe fn load(p: *const u16) -> f32 {
                <$h as HalfFloat>::to_f32(load_u16(p))
            }
            #[inline(always)]
            unsafe fn load_vec(p: *const u16) -> [f32; 8] {
                load_u16x8(p).0.map(<$h as HalfFloat>::to_f32)
            }
            #[inline(always)]
            unsafe fn store(p: *mut u16, v: f32) {
                store_u16(p, <$h as HalfFloat>::from_f32(v))
            }
            #[inline(always)]
            unsafe fn store_vec(p: *mut u16, v: [f32; 8]) {
                store_u32x4(p as *mut u32, [0, 1, 2, 3].map(|i| <$h as HalfFloat>::pack2(v[2 * i], v[2 * i + 1])))
            }
            #[inline(always)]
            unsafe fn load8_raw(p: *const u16, _second: usize) -> [u32; 8] {
                let [a, b, c, d] = load_u32x4(p as *const u32);
                [a, b, c, d, 0, 0, 0, 0]
            }
            #[inline(always)]
            fn widen8(raw: [u32; 8]) -> [f32; 8] {
                let mut v = [0.0f32; 8];
                for i in 0..4 {
                    (v[2 * i], v[2 * i + 1]) = <$h as HalfFloat>::unpack2(raw[i]);
                }
                v
            }
        }
    )*};
}
half_float!(F16, BF16);

/// Where value `e` (of 8) of chunk `k` lies, for a thread at `lane` of `size` lanes: 16-byte
/// vectors of `vec` values (4 or 8) with a warp's lanes on consecutive vectors, so that each load
/// instruction of a warp reads one contiguous span; `vec == 0`: scalars, lanes consecutive.
#[inline(always)]
fn slot_offset(vec: u32, lane: u32, size: u32, k: usize, e: usize) -> u32 {
    let (k, e) = (k as u32, e as u32);
    match vec {
        8 => 8 * (lane + k * size) + e,
        4 => 4 * (lane + (2 * k + e / 4) * size) + e % 4,
        _ => lane + size * (8 * k + e),
    }
}

/// Where this thread works: row, lane in its team, and the team's range `[begin, end)` of the row
/// (empty past the last row).
#[derive(Clone, Copy)]
pub struct RowTeam {
    pub row: usize,
    pub lane: usize,
    pub size: usize,
    pub begin: usize,
    pub end: usize,
    /// The chunk's index along the row (`blockIdx.y`).
    pub chunk: usize,
    /// Chunks per row (`gridDim.y`).
    chunks: usize,
    /// Values per 16-byte vector, or 0 where rows are not 16-byte aligned (scalar accesses).
    vec: u32,
    /// `begin`, `end`, `lane`, `size` in 32 bits (rows are below 2^26 values): the per-value
    /// index arithmetic stays in single instructions.
    narrow: [u32; 4],
}

impl RowTeam {
    /// The team of this thread for rows of `cols` values of format `F`, teams of `size` threads
    /// (a power of two ≤ 32, or `blockDim.x`), chunks of `chunk` values (a multiple of 8).
    #[inline(always)]
    pub fn new<F: Float>(rows: usize, cols: usize, size: usize, chunk: usize) -> Self {
        Self::on_chunk::<F>(rows, cols, size, chunk, block_y())
    }

    /// As [`RowTeam::new`], on chunk `c` of the row.
    #[inline(always)]
    fn on_chunk<F: Float>(rows: usize, cols: usize, size: usize, chunk: usize, c: usize) -> Self {
        // `size` is a power of two: shifts and masks, not divisions.
        let shift = size.trailing_zeros();
        let (row, lane) = if size >= block_dim_x() {
            (block_x(), thread_x())
        } else {
            ((block_x() * block_dim_x() + thread_x()) >> shift, thread_x() & (size - 1))
        };
        Self::placed::<F>((row, lane, size), (c, grid_dim_y()), (rows, cols, chunk))
    }

    /// The team of this thread in a launch of `mode`: as [`RowTeam::new`], except that a
    /// `ROW_APPLY` launch takes the chunks last to first (`blockIdx.y` counted from the end: the
    /// `ROW_PARTIAL` launch before it read them first to last, so the ones it read last may
    /// still be in L2), and that a `ROW_CLUSTER` launch runs a block per chunk with the row on
    /// `blockIdx.y` and the chunk on `blockIdx.x` (see the module documentation). Its team is
    /// the block of `NN_ROW_BLOCK` threads that `RowPlan` gives every split row, taken here as a
    /// constant (`size` is that value): in the cluster builds the distance between a scalar
    /// chunk's values then folds into each access's immediate offset, instead of a 64-bit
    /// multiply and add per value.
    #[inline(always)]
    pub fn in_mode<F: Float>(rows: usize, cols: usize, size: usize, chunk: usize, mode: u32) -> Self {
        if mode == ROW_APPLY {
            return Self::on_chunk::<F>(rows, cols, size, chunk, grid_dim_y() - 1 - block_y());
        }
        if mode != ROW_CLUSTER {
            return Self::new::<F>(rows, cols, size, chunk);
        }
        let place = (block_y(), thread_x(), NN_ROW_BLOCK);
        Self::placed::<F>(place, (block_x(), grid_dim_x()), (rows, cols, chunk))
    }

    /// The team at `row` with `lane` of `size` lanes, on chunk `c` of `chunks` of `chunk` values.
    #[inline(always)]
    fn placed<F: Float>(
        (row, lane, size): (usize, usize, usize),
        (c, chunks): (usize, usize),
        (rows, cols, chunk): (usize, usize, usize),
    ) -> Self {
        let begin = c * chunk;
        let end = if row < rows { cols.min(begin + chunk) } else { begin };
        let vec = if cols % F::PER_16B == 0 { F::PER_16B as u32 } else { 0 };
        let narrow = [begin as u32, end as u32, lane as u32, size as u32];
        RowTeam { row, lane, size, begin, end, chunk: c, chunks, vec, narrow }
    }

    /// The same lanes on row `row` of whole (unsplit) rows of `cols` values: for kernels whose
    /// teams walk several rows and keep per-column sums across them (the mapping of values to
    /// lanes is the same on every row).
    #[inline(always)]
    pub fn at_row(&self, row: usize, cols: usize) -> Self {
        let mut t = *self;
        t.row = row;
        t.begin = 0;
        t.end = cols;
        t.narrow[0] = 0;
        t.narrow[1] = cols as u32;
        t
    }

    /// Index in the row of value `e` of chunk `k` of this thread.
    #[inline(always)]
    pub fn index(&self, k: usize, e: usize) -> usize {
        self.index32(k, e) as usize
    }

    #[inline(always)]
    fn index32(&self, k: usize, e: usize) -> u32 {
        let [begin, _, lane, size] = self.narrow;
        begin + slot_offset(self.vec, lane, size, k, e)
    }

    /// Whether value `e` of chunk `k` is in the range.
    #[inline(always)]
    pub fn holds(&self, k: usize, e: usize) -> bool {
        self.index32(k, e) < self.narrow[1]
    }

    /// Whether chunk `k` lies wholly in the range (its last value is its furthest).
    #[inline(always)]
    fn inside(&self, k: usize) -> bool {
        self.holds(k, 7)
    }

    /// Whether chunk `k` lies wholly in the range and loads as vectors.
    #[inline(always)]
    fn whole(&self, k: usize) -> bool {
        self.vec != 0 && self.inside(k)
    }

    /// Chunk `k` of the row at `row_start` as scalars (`vec` = 0) wholly in the range: its first
    /// value's address, and the distance between consecutive values. One address and no bounds
    /// test a value: with a test each, every value was its own branch (`BSSY`/`BSYNC`, ~10
    /// instructions a value).
    #[inline(always)]
    fn scalar_run<T>(&self, row_start: *const T, k: usize) -> (*const T, usize) {
        // `slot_offset`'s scalar layout at e = 0, written out: through `slot_offset` the
        // multiplications reassociate and 30 row kernels' SASS changes.
        let [begin, _, lane, size] = self.narrow;
        let first = begin + lane + size * 8 * k as u32;
        // SAFETY: address arithmetic within the row (the chunk is inside it).
        (unsafe { row_start.add(first as usize) }, self.size)
    }

    /// Distance from a chunk's first value to its fifth (the second f32 vector).
    #[inline(always)]
    fn second(&self, k: usize) -> usize {
        (self.index32(k, 4) - self.index32(k, 0)) as usize
    }

    /// `f(k, e)` for each of this thread's values in range.
    #[inline(always)]
    pub fn each(&self, f: impl FnMut(usize, usize)) {
        self.each_first::<SLOTS>(f)
    }

    /// [`RowTeam::each`] over the first `K` chunks only: for kernels whose rows never reach a
    /// thread's later chunks, so that their registers are never allocated.
    #[inline(always)]
    pub fn each_first<const K: usize>(&self, f: impl FnMut(usize, usize)) {
        self.visit_first::<K, true>(f)
    }

    /// [`RowTeam::each_first`]; `BY_LAYOUT`: vector and scalar chunks wholly in range in two
    /// branches instead of one. Measured (nineteenth session): the backward kernels' loops are
    /// ~10% faster with two (layer norm bf16 (16384, 384)), the forward folds (`fold_slots`,
    /// `welford_slots`) 1-5% faster with one.
    #[inline(always)]
    fn visit_first<const K: usize, const BY_LAYOUT: bool>(&self, mut f: impl FnMut(usize, usize)) {
        unroll!(k in [0, 1, 2, 3] => {
            if k < K {
                if BY_LAYOUT && self.whole(k) {
                    unroll!(e in [0, 1, 2, 3, 4, 5, 6, 7] => { f(k, e); });
                } else if self.inside(k) {
                    unroll!(e in [0, 1, 2, 3, 4, 5, 6, 7] => { f(k, e); });
                } else if self.holds(k, 0) {
                    unroll!(e in [0, 1, 2, 3, 4, 5, 6, 7] => {
                        if self.holds(k, e) {
                            f(k, e);
                        }
                    });
                }
            }
        });
    }

    /// This thread's values of the row at `row_start`; `fill` where out of range.
    ///
    /// # Safety
    /// `row_start` is the start of this team's row (16-byte aligned when the row length is a
    /// multiple of `F::PER_16B`), readable up to `end`.
    #[inline(always)]
    pub unsafe fn load<F: Float>(&self, row_start: *const F::Raw, fill: f32) -> Slots {
        self.load_first::<F, SLOTS>(row_start, fill)
    }

    /// [`RowTeam::load`] of the first `K` chunks (the others `fill`; see
    /// [`RowTeam::each_first`]).
    ///
    /// # Safety
    /// As [`RowTeam::load`].
    #[inline(always)]
    pub unsafe fn load_first<F: Float, const K: usize>(&self, row_start: *const F::Raw, fill: f32) -> Slots {
        let mut v = [[fill; 8]; SLOTS];
        unroll!(k in [0, 1, 2, 3] => {
            if k < K {
                v[k] = self.load_chunk::<F>(row_start, k, fill);
            }
        });
        v
    }

    /// The loads of `N` rows of this team's first `K` chunks at once (e.g. x and dy of a
    /// backward pass): every whole 16-byte chunk of all of them, unconverted, so that the warp
    /// waits for memory once rather than once per load, and so that a warp walking rows can
    /// issue the next row's before it works on this one's (the words stay in flight meanwhile);
    /// [`RowTeam::widen_rows`] converts them. The raw words and the values are held at once: for
    /// kernels with registers to spare (a warp walking rows), not for the block-per-row ones.
    ///
    /// # Safety
    /// As [`RowTeam::load`], for each row.
    #[inline(always)]
    pub unsafe fn load_rows_raw<F: Float, const K: usize, const N: usize>(
        &self,
        rows: [*const F::Raw; N],
    ) -> [[[u32; 8]; SLOTS]; N] {
        let mut raw = [[[0u32; 8]; SLOTS]; N];
        unroll!(k in [0, 1, 2, 3] => {
            if k < K && self.whole(k) {
                let (at, second) = (self.index(k, 0), self.second(k));
                for r in 0..N {
                    raw[r][k] = F::load8_raw(rows[r].add(at), second);
                }
            }
        });
        raw
    }

    /// The values of `N` rows from their whole chunks' words `raw` ([`RowTeam::load_rows_raw`]);
    /// the partial chunks at a row's end are loaded here.
    ///
    /// # Safety
    /// As [`RowTeam::load`], for each row.
    #[inline(always)]
    pub unsafe fn widen_rows<F: Float, const K: usize, const N: usize>(
        &self,
        raw: [[[u32; 8]; SLOTS]; N],
        rows: [*const F::Raw; N],
        fill: f32,
    ) -> [Slots; N] {
        let mut v = [[[fill; 8]; SLOTS]; N];
        unroll!(k in [0, 1, 2, 3] => {
            if k < K {
                let whole = self.whole(k);
                for r in 0..N {
                    v[r][k] = if whole { F::widen8(raw[r][k]) } else { self.load_chunk::<F>(rows[r], k, fill) };
                }
            }
        });
        v
    }

    /// This thread's chunk `k` of the row at `row_start` (for per-row parameters such as γ, read
    /// when needed rather than held).
    ///
    /// # Safety
    /// As [`RowTeam::load`].
    #[inline(always)]
    pub unsafe fn load_chunk<F: Float>(&self, row_start: *const F::Raw, k: usize, fill: f32) -> [f32; 8] {
        if self.whole(k) {
            return F::load8(row_start.add(self.index(k, 0)), self.second(k));
        }
        let mut v = [fill; 8];
        if self.inside(k) {
            let (at, step) = self.scalar_run(row_start, k);
            unroll!(e in [0, 1, 2, 3, 4, 5, 6, 7] => {
                v[e] = F::load(at.add(e * step));
            });
        } else if self.holds(k, 0) {
            unroll!(e in [0, 1, 2, 3, 4, 5, 6, 7] => {
                if self.holds(k, e) {
                    v[e] = F::load(row_start.add(self.index(k, e)));
                }
            });
        }
        v
    }

    /// Store `f(k)`, this thread's chunk `k` of the output, for each chunk (the values in range)
    /// to the row at `row_start`.
    ///
    /// # Safety
    /// As [`RowTeam::load`], writable.
    #[inline(always)]
    pub unsafe fn store<F: Float>(&self, row_start: *mut F::Raw, f: impl Fn(usize) -> [f32; 8]) {
        self.store_first::<F, SLOTS>(row_start, f)
    }

    /// [`RowTeam::store`] of the first `K` chunks (see [`RowTeam::each_first`]).
    ///
    /// # Safety
    /// As [`RowTeam::store`].
    #[inline(always)]
    pub unsafe fn store_first<F: Float, const K: usize>(
        &self,
        row_start: *mut F::Raw,
        f: impl Fn(usize) -> [f32; 8],
    ) {
        unroll!(k in [0, 1, 2, 3] => {
            if k < K {
                if self.whole(k) {
                    F::store8(row_start.add(self.index(k, 0)), self.second(k), f(k));
                } else if self.inside(k) {
                    let v = f(k);
                    let (at, step) = self.scalar_run(row_start as *const F::Raw, k);
                    unroll!(e in [0, 1, 2, 3, 4, 5, 6, 7] => {
                        F::store(at.add(e * step) as *mut F::Raw, v[e]);
                    });
                } else if self.holds(k, 0) {
                    let v = f(k);
                    unroll!(e in [0, 1, 2, 3, 4, 5, 6, 7] => {
                        if self.holds(k, e) {
                            F::store(row_start.add(self.index(k, e)), v[e]);
                        }
                    });
                }
            }
        });
    }

    /// The team's combination of every member's `s`, in a fixed order; every thread of the block
    /// must call it (block teams hold barriers).
    #[inline(always)]
    pub fn combine<S: RowStat>(&self, s: S) -> S {
        if self.size >= block_dim_x() {
            return block_combine(s);
        }
        let mut s = s;
        let mut m = self.size / 2;
        while m > 0 {
            s = s.merge(s.shuffle_xor(m as u32));
            m /= 2;
        }
        s
    }

    /// The merge of the partial statistics of this team's row, one per chunk (`gridDim.y` of
    /// them), written by a split launch's first pass at `partials[(row · chunks + c) · WIDTH]`.
    ///
    /// # Safety
    /// `partials` holds those statistics for every row; every thread of the block calls it.
    #[inline(always)]
    pub unsafe fn merge_partials<S: RowStat>(&self, partials: *const f32) -> S {
        let chunks = self.chunks;
        let mut s = S::EMPTY;
        let mut c = self.lane;
        while self.begin < self.end && c < chunks {
            s = s.merge(S::read(partials.add((self.row * chunks + c) * S::WIDTH)));
            c += self.size;
        }
        self.combine(s)
    }

    /// The statistic of this team's row in a launch of `mode`: `local()` (the team's combined
    /// statistic of the values it holds) for whole rows; merged over the row's chunks in chunk
    /// order for `ROW_APPLY` (from the partials, without calling `local`) and `ROW_CLUSTER`
    /// (through the cluster's shared memory); `None` for `ROW_PARTIAL`, which writes the chunk's
    /// partial instead. Every thread of the block (of the cluster, for `ROW_CLUSTER`) calls it.
    ///
    /// # Safety
    /// As [`RowTeam::merge_partials`] and [`RowTeam::write_partial`] in their modes.
    #[inline(always)]
    pub unsafe fn row_stat<S: RowStat>(
        &self,
        mode: u32,
        partials: *mut f32,
        local: impl FnOnce() -> S,
    ) -> Option<S> {
        if mode == ROW_APPLY {
            return Some(self.merge_partials(partials));
        }
        let s = local();
        match mode {
            ROW_PARTIAL => {
                self.write_partial(partials, s);
                None
            }
            ROW_CLUSTER => Some(self.merge_cluster(s)),
            _ => Some(s),
        }
    }

    /// The merge, in chunk (cluster rank) order, of the block statistics `s` of the cluster's
    /// blocks: each block publishes its own in shared memory and reads the others' there.
    #[inline(always)]
    fn merge_cluster<S: RowStat>(&self, s: S) -> S {
        #[cfg(any(feature = "sm90a", target_feature = "sm_90"))]
        {
            let scratch = shared_ptr(&raw mut CLUSTER_STAT);
            if thread_x() == 0 {
                for (i, &e) in s.to_array().iter().enumerate().take(S::WIDTH) {
                    // SAFETY: WIDTH ≤ 3: inside the scratch.
                    unsafe { *scratch.add(i) = e };
                }
            }
            cluster_sync();
            let mut total = S::EMPTY;
            for rank in 0..self.chunks as u32 {
                let mut v = [0.0f32; 3];
                for (i, e) in v.iter_mut().enumerate().take(S::WIDTH) {
                    // SAFETY: block `rank` of this cluster wrote its statistic before the barrier
                    // above and waits at the one below before it may exit.
                    *e = unsafe { load_cluster_shared_f32(shared_addr(scratch.add(i)), rank) };
                }
                total = total.merge(S::from_array(v));
            }
            cluster_sync();
            total
        }
        #[cfg(not(any(feature = "sm90a", target_feature = "sm_90")))]
        {
            // Targets without clusters: the host never launches ROW_CLUSTER there.
            s
        }
    }

    /// Write this team's statistic as its chunk's partial (lane 0 of the team writes).
    ///
    /// # Safety
    /// `partials` has room for `gridDim.y` statistics per row.
    #[inline(always)]
    pub unsafe fn write_partial<S: RowStat>(&self, partials: *mut f32, s: S) {
        if self.lane == 0 && self.begin < self.end {
            s.write(partials.add((self.row * self.chunks + self.chunk) * S::WIDTH));
        }
    }
}

/// A row that one warp holds as 16-byte vectors, for 16-byte aligned rows (`cols` a multiple of
/// `F::PER_16B`) of at most `32 · V` vectors: lane `l`'s vector `i` is the row's vector
/// `l + 32·i`, so that each load instruction of the warp reads one contiguous span. The row teams
/// above cover every row shape (scalar rows, partial chunks, splits), which costs their warp rows
/// 1.8× the instructions a row of this form at 384 16-bit values (perf-notes, thirty-eighth
/// session).
#[derive(Clone, Copy)]
pub struct WarpRow<const V: usize> {
    pub lane: u32,
    vectors: u32,
    per: u32,
}

impl<const V: usize> WarpRow<V> {
    /// This lane's part of rows of `cols` values of format `F`.
    #[inline(always)]
    pub fn new<F: Float>(cols: usize) -> Self {
        WarpRow { lane: lane() as u32, vectors: (cols / F::PER_16B) as u32, per: F::PER_16B as u32 }
    }

    /// Whether this lane's vector `i` lies in the row.
    #[inline(always)]
    pub fn holds(&self, i: usize) -> bool {
        self.lane + 32 * (i as u32) < self.vectors
    }

    /// The index in the row of the first value of this lane's vector `i`.
    #[inline(always)]
    pub fn at(&self, i: usize) -> usize {
        ((self.lane + 32 * i as u32) * self.per) as usize
    }

    /// The bits of this lane's vectors of the row at `row` (zeros past its end), not yet
    /// converted: a warp walking rows issues the next row's before it works on this one.
    ///
    /// # Safety
    /// `row` is the start of a 16-byte aligned row of `cols` readable values.
    #[inline(always)]
    pub unsafe fn load_raw<F: Float>(&self, row: *const F::Raw) -> [[u32; 4]; V] {
        let mut raw = [[0u32; 4]; V];
        unroll!(i in [0, 1, 2, 3] => {
            if i < V && self.holds(i) {
                raw[i] = F::load_vec_raw(row.add(self.at(i)));
            }
        });
        raw
    }

    /// The values of [`WarpRow::load_raw`]'s bits (zeros past the row's end).
    #[inline(always)]
    pub fn widen<F: Float>(raw: [[u32; 4]; V]) -> [[f32; 8]; V] {
        raw.map(F::widen_vec)
    }

    /// This lane's values of the row at `row` (zeros past its end).
    ///
    /// # Safety
    /// As [`WarpRow::load_raw`].
    #[inline(always)]
    pub unsafe fn load<F: Float>(&self, row: *const F::Raw) -> [[f32; 8]; V] {
        Self::widen::<F>(self.load_raw::<F>(row))
    }

    /// Store this lane's values `v` (those in the row) to the row at `row`.
    ///
    /// # Safety
    /// `row` is the start of a 16-byte aligned row of `cols` writable values.
    #[inline(always)]
    pub unsafe fn store<F: Float>(&self, row: *mut F::Raw, v: &[[f32; 8]; V]) {
        unroll!(i in [0, 1, 2, 3] => {
            if i < V && self.holds(i) {
                F::store_vec(row.add(self.at(i)), v[i]);
            }
        });
    }

    /// `Σ f(i, e)` over this lane's values in the row (`e` < `F::PER_16B`), each vector's sum a
    /// tree (short dependency chains), then the warp's butterfly: every lane gets the row's sum.
    #[inline(always)]
    pub fn sum<F: Float>(&self, f: impl Fn(usize, usize) -> f32) -> f32 {
        let mut total = 0.0f32;
        unroll!(i in [0, 1, 2, 3] => {
            if i < V && self.holds(i) {
                let mut s = [0.0f32; 8];
                unroll!(e in [0, 1, 2, 3, 4, 5, 6, 7] => {
                    if e < F::PER_16B {
                        s[e] = f(i, e);
                    }
                });
                let low = (s[0] + s[1]) + (s[2] + s[3]);
                total += if F::PER_16B == 8 { low + ((s[4] + s[5]) + (s[6] + s[7])) } else { low };
            }
        });
        warp_reduce::<Sum>(total)
    }
}

/// The row items of a launch, `body(team, mode)` for this block's team: in the builds of 32
/// values a thread (`K = 4`) in the launch's `mode` (`ROW_WHOLE`, the `ROW_PARTIAL` /
/// `ROW_APPLY` launches of split rows, or `ROW_CLUSTER`); in the narrower builds (whole rows only) in
/// `ROW_WHOLE`, a constant, so that they carry no registers for the split modes.
#[inline(always)]
pub fn row_items<F: Float, const K: usize>(
    (rows, cols, team, chunk): (usize, usize, usize, usize),
    mode: u32,
    mut body: impl FnMut(&RowTeam, u32),
) {
    let mode = if K == SLOTS { mode } else { ROW_WHOLE };
    body(&RowTeam::in_mode::<F>(rows, cols, team, chunk, mode), mode);
}

/// A statistic of a row that merges associatively (in the fixed order of the team), kept as
/// `WIDTH` (≤ 3) floats.
pub trait RowStat: Copy {
    const WIDTH: usize;
    const EMPTY: Self;
    fn merge(self, other: Self) -> Self;
    fn to_array(self) -> [f32; 3];
    fn from_array(v: [f32; 3]) -> Self;

    /// The statistic of lane `lane ^ mask` of the warp.
    #[inline(always)]
    fn shuffle_xor(self, mask: u32) -> Self {
        let mut v = self.to_array();
        for e in v.iter_mut().take(Self::WIDTH) {
            *e = shfl_xor(*e, mask);
        }
        Self::from_array(v)
    }
    /// # Safety
    /// `p` holds `WIDTH` floats of global memory written by an earlier launch.
    #[inline(always)]
    unsafe fn read(p: *const f32) -> Self {
        let mut v = [0.0f32; 3];
        for (i, e) in v.iter_mut().enumerate().take(Self::WIDTH) {
            *e = load_l2_f32(p.add(i));
        }
        Self::from_array(v)
    }
    /// # Safety
    /// `p` has room for `WIDTH` floats of global memory.
    #[inline(always)]
    unsafe fn write(self, p: *mut f32) {
        for (i, &e) in self.to_array().iter().enumerate().take(Self::WIDTH) {
            store_f32(p.add(i), e);
        }
    }
}

/// One value folded with `R`.
pub struct Folded<R: ReduceOp>(pub f32, pub PhantomData<R>);

impl<R: ReduceOp> Clone for Folded<R> {
    #[inline(always)]
    fn clone(&self) -> Self {
        *self
    }
}
impl<R: ReduceOp> Copy for Folded<R> {}

impl<R: ReduceOp> Folded<R> {
    #[inline(always)]
    pub fn new(v: f32) -> Self {
        Folded(v, PhantomData)
    }
}

impl<R: ReduceOp> RowStat for Folded<R> {
    const WIDTH: usize = 1;
    const EMPTY: Self = Folded(R::IDENTITY, PhantomData);
    #[inline(always)]
    fn merge(self, o: Self) -> Self {
        Self::new(R::combine(self.0, o.0))
    }
    #[inline(always)]
    fn to_array(self) -> [f32; 3] {
        [self.0, 0.0, 0.0]
    }
    #[inline(always)]
    fn from_array(v: [f32; 3]) -> Self {
        Self::new(v[0])
    }
}

/// Two sums.
#[derive(Clone, Copy)]
pub struct Sum2(pub f32, pub f32);

impl RowStat for Sum2 {
    const WIDTH: usize = 2;
    const EMPTY: Self = Sum2(0.0, 0.0);
    #[inline(always)]
    fn merge(self, o: Self) -> Self {
        Sum2(self.0 + o.0, self.1 + o.1)
    }
    #[inline(always)]
    fn to_array(self) -> [f32; 3] {
        [self.0, self.1, 0.0]
    }
    #[inline(always)]
    fn from_array(v: [f32; 3]) -> Self {
        Sum2(v[0], v[1])
    }
}

/// `(max, Σ e^(x - max))`: the online softmax normalizer.
#[derive(Clone, Copy)]
pub struct MaxSumExp(pub f32, pub f32);

impl RowStat for MaxSumExp {
    const WIDTH: usize = 2;
    const EMPTY: Self = MaxSumExp(f32::NEG_INFINITY, 0.0);
    #[inline(always)]
    fn merge(self, o: Self) -> Self {
        let m = Max::combine(self.0, o.0);
        let scaled = |s: MaxSumExp| if s.1 == 0.0 { 0.0 } else { s.1 * exp_fast(s.0 - m) };
        MaxSumExp(m, scaled(self) + scaled(o))
    }
    #[inline(always)]
    fn to_array(self) -> [f32; 3] {
        [self.0, self.1, 0.0]
    }
    #[inline(always)]
    fn from_array(v: [f32; 3]) -> Self {
        MaxSumExp(v[0], v[1])
    }
}

/// Welford's `(count, mean, M2)`, merged by Chan's formula.
#[derive(Clone, Copy)]
pub struct Welford(pub f32, pub f32, pub f32);

impl RowStat for Welford {
    const WIDTH: usize = 3;
    const EMPTY: Self = Welford(0.0, 0.0, 0.0);
    #[inline(always)]
    fn merge(self, o: Self) -> Self {
        let (n, mean, m2) = welford_combine((self.0, self.1, self.2), (o.0, o.1, o.2));
        Welford(n, mean, m2)
    }
    #[inline(always)]
    fn to_array(self) -> [f32; 3] {
        [self.0, self.1, self.2]
    }
    #[inline(always)]
    fn from_array(v: [f32; 3]) -> Self {
        Welford(v[0], v[1], v[2])
    }
}

shared_array!(static ROW_STAT_SCRATCH: [f32; 3 * 32]);
// A block's statistic for the other blocks of its cluster (`RowTeam::merge_cluster`).
shared_array!(static CLUSTER_STAT: [f32; 4]);

/// Merge every thread's `s` over the block: butterflies within each warp, then every thread
/// merges the warps' results in warp order.
#[inline(always)]
fn block_combine<S: RowStat>(s: S) -> S {
    let mut s = s;
    let mut m = 16;
    while m > 0 {
        s = s.merge(s.shuffle_xor(m));
        m /= 2;
    }
    let scratch = shared_ptr(&raw mut ROW_STAT_SCRATCH);
    if lane() == 0 {
        for (i, &e) in s.to_array().iter().enumerate().take(S::WIDTH) {
            // SAFETY: warp_in_block() < 32: inside the scratch.
            unsafe { *scratch.add(3 * warp_in_block() + i) = e };
        }
    }
    sync_threads();
    let mut total = S::EMPTY;
    for w in 0..block_dim_x().div_ceil(32) {
        let mut v = [0.0f32; 3];
        for (i, e) in v.iter_mut().enumerate().take(S::WIDTH) {
            // SAFETY: written by warp `w` before the barrier.
            *e = unsafe { *scratch.add(3 * w + i) };
        }
        total = total.merge(S::from_array(v));
    }
    // The scratch is reused by the next call: nobody may overwrite it before all have read it.
    sync_threads();
    total
}

/// The team's `(max, Σ e^(x - max))` of this thread's values `v` (its first `K` chunks): the max,
/// then the sum of exponentials, two plain team reductions (only the merge of a split row's
/// chunks takes the online form).
#[inline(always)]
pub fn max_sum_exp<const K: usize>(t: &RowTeam, v: &Slots) -> MaxSumExp {
    let m = t.combine(Folded::<Max>::new(fold_slots::<Max, K>(t, v, |e| e))).0;
    MaxSumExp(m, t.combine(Folded::<Sum>::new(fold_slots::<Sum, K>(t, v, |e| exp_fast(e - m)))).0)
}

/// The fold by `R` of `f(value)` over this thread's values in range (its first `K` chunks).
#[inline(always)]
pub fn fold_slots<R: ReduceOp, const K: usize>(t: &RowTeam, v: &Slots, f: impl Fn(f32) -> f32) -> f32 {
    let mut acc = R::IDENTITY;
    t.visit_first::<K, false>(|k, e| acc = R::combine(acc, f(v[k][e])));
    acc
}

/// This thread's `(count, mean, M2)` of its values in range (its first `K` chunks): two passes
/// over the registers (the mean, its sum times a reciprocal within an ulp; then M2 about it), so
/// that a team merges them once (Chan's formula) instead of reducing the mean and then the squares.
#[inline(always)]
pub fn welford_slots<const K: usize>(t: &RowTeam, v: &Slots) -> Welford {
    let (mut n, mut sum) = (0u32, 0.0f32);
    t.visit_first::<K, false>(|k, e| {
        n += 1;
        sum += v[k][e];
    });
    if n == 0 {
        return Welford::EMPTY;
    }
    let mean = sum * rcp_approx(n as f32);
    Welford(n as f32, mean, fold_slots::<Sum, K>(t, v, |e| (e - mean) * (e - mean)))
}

/// Column teams: a reduction over the leading rows of `[rows, cols]` (`Σ_r f(r, c)`), for the
/// sums down columns (`sum_leading`, layer norm's parameter gradients). A 1-D block is
/// `c_lanes × r_lanes` threads (`c_lanes` a power of two ≤ 32, `c_lanes · r_lanes = blockDim.x`);
/// it covers `8 · c_lanes` columns (`blockIdx.x`) and the rows `[g·rows_per_group, ...)` of group
/// `g = blockIdx.y`, each thread 8 columns (16-byte loads where rows are 16-byte aligned) and every
/// `r_lanes`-th row. The row lanes' sums are then added in lane order through shared memory:
/// deterministic, no atomics.
#[derive(Clone, Copy)]
pub struct ColumnTeam {
    c_lane: usize,
    c_lanes: usize,
    r_lane: usize,
    r_lanes: usize,
    col0: usize,
    cols: usize,
    pub rows_begin: usize,
    pub rows_end: usize,
    /// Values per 16-byte vector, or 0 (scalar accesses).
    vec: usize,
    /// This thread's 8 columns lie inside the row as whole 16-byte vectors: `load` reads them as
    /// vectors, without a bounds test.
    vectors: bool,
}

/// Column sums a block adds up in shared memory: `K ≤ 2` sums of `blockDim.x · 8` columns.
const COLUMN_SCRATCH: usize = 2 * 256 * 8;
shared_array!(static COLUMN_SCRATCH_F32: [f32; 2 * 256 * 8]);

impl ColumnTeam {
    #[inline(always)]
    pub fn new<F: Float>(rows: usize, cols: usize, c_lanes: usize, rows_per_group: usize) -> Self {
        let rows_begin = block_y() * rows_per_group;
        Self::on_rows::<F>(rows_begin, rows.min(rows_begin + rows_per_group), cols, c_lanes)
    }

    /// The block's team over rows `[rows_begin, rows_end)` (whatever `blockIdx.y`).
    #[inline(always)]
    pub fn on_rows<F: Float>(rows_begin: usize, rows_end: usize, cols: usize, c_lanes: usize) -> Self {
        let mut team = ColumnTeam {
            c_lane: thread_x() % c_lanes,
            c_lanes,
            r_lane: thread_x() / c_lanes,
            r_lanes: block_dim_x() / c_lanes,
            col0: block_x() * 8 * c_lanes,
            cols,
            rows_begin,
            rows_end,
            vec: if cols % F::PER_16B == 0 { F::PER_16B } else { 0 },
            vectors: false,
        };
        team.vectors = team.vec != 0 && team.column(7) < cols;
        team
    }

    /// The offset from `col0` of this thread's value `e`.
    #[inline(always)]
    fn slot(&self, e: usize) -> usize {
        slot_offset(self.vec as u32, self.c_lane as u32, self.c_lanes as u32, 0, e) as usize
    }

    /// The column of this thread's value `e` (may be ≥ cols).
    #[inline(always)]
    pub fn column(&self, e: usize) -> usize {
        self.col0 + self.slot(e)
    }

    /// This thread's 8 values of the row at `row_start` (0 past the last column).
    ///
    /// # Safety
    /// `row_start` is a row of `cols` values (16-byte aligned when `cols` is a multiple of
    /// `F::PER_16B`).
    #[inline(always)]
    pub unsafe fn load<F: Float>(&self, row_start: *const F::Raw) -> [f32; 8] {
        if self.vectors {
            return F::load8(row_start.add(self.column(0)), self.column(4) - self.column(0));
        }
        let mut v = [0.0f32; 8];
        unroll!(e in [0, 1, 2, 3, 4, 5, 6, 7] => {
            if self.column(e) < self.cols {
                v[e] = F::load(row_start.add(self.column(e)));
            }
        });
        v
    }

    /// [`ColumnTeam::load`] of an f32 row through L2 (`ld.global.cg`), for rows other blocks
    /// wrote before a GPU-scope fence (a team made for f32 rows).
    ///
    /// # Safety
    /// As [`ColumnTeam::load`].
    #[inline(always)]
    pub unsafe fn load_l2(&self, row_start: *const f32) -> [f32; 8] {
        let mut v = [0.0f32; 8];
        if self.vectors {
            let (a, b) = (row_start.add(self.column(0)), row_start.add(self.column(4)));
            v[..4].copy_from_slice(&load_l2_f32x4(a).0);
            v[4..].copy_from_slice(&load_l2_f32x4(b).0);
            return v;
        }
        unroll!(e in [0, 1, 2, 3, 4, 5, 6, 7] => {
            if self.column(e) < self.cols {
                v[e] = load_l2_f32(row_start.add(self.column(e)));
            }
        });
        v
    }

    /// Store this thread's 8 values `v` (those inside the row) to the row at `row_start`.
    ///
    /// # Safety
    /// As [`ColumnTeam::load`], writable.
    #[inline(always)]
    pub unsafe fn store<F: Float>(&self, row_start: *mut F::Raw, v: [f32; 8]) {
        if self.vectors {
            return F::store8(row_start.add(self.column(0)), self.column(4) - self.column(0), v);
        }
        unroll!(e in [0, 1, 2, 3, 4, 5, 6, 7] => {
            if self.column(e) < self.cols {
                F::store(row_start.add(self.column(e)), v[e]);
            }
        });
    }

    /// `Σ_r f(r)` over this group's rows, then over the block's row lanes; `out(column, sums)`
    /// for each of the block's columns (called by one thread per column).
    #[inline(always)]
    pub fn sum<const K: usize>(&self, f: impl Fn(usize) -> [[f32; 8]; K], out: impl FnMut(usize, [f32; K])) {
        self.sum_with(f, |_, v| v, out)
    }

    /// [`ColumnTeam::sum`] of `map(r, load(r))`: every load of a step's four rows is issued
    /// before the first `map` (which may store: a stored row would otherwise hold the next
    /// row's loads behind it).
    #[inline(always)]
    pub fn sum_with<L: Copy, const K: usize>(
        &self,
        load: impl Fn(usize) -> L,
        mut map: impl FnMut(usize, L) -> [[f32; 8]; K],
        mut out: impl FnMut(usize, [f32; K]),
    ) {
        let mut acc = [[0.0f32; 8]; K];
        let add = |acc: &mut [[f32; 8]; K], v: [[f32; 8]; K]| {
            for k in 0..K {
                unroll!(e in [0, 1, 2, 3, 4, 5, 6, 7] => { acc[k][e] += v[k][e]; });
            }
        };
        let step = self.r_lanes;
        let mut r = self.rows_begin + self.r_lane;
        if self.vectors {
            // Four rows' vector loads in flight before their sums, added in row order as one at a
            // time would (the same bits). The test is made once here, so the loads' own branch
            // folds away.
            while r + 3 * step < self.rows_end {
                let v = [load(r), load(r + step), load(r + 2 * step), load(r + 3 * step)];
                unroll!(i in [0, 1, 2, 3] => { add(&mut acc, map(r + i * step, v[i])); });
                r += 4 * step;
            }
        }
        while r < self.rows_end {
            add(&mut acc, map(r, load(r)));
            r += step;
        }
        let scratch = shared_ptr(&raw mut COLUMN_SCRATCH_F32);
        let width = 8 * self.c_lanes;
        for k in 0..K {
            unroll!(e in [0, 1, 2, 3, 4, 5, 6, 7] => {
                // SAFETY: k < 2, r_lane · width + slot < blockDim.x · 8 ≤ 2048.
                unsafe { *scratch.add(k * COLUMN_SCRATCH / 2 + self.r_lane * width + self.slot(e)) = acc[k][e] };
            });
        }
        sync_threads();
        let j = thread_x();
        if j < width && self.col0 + j < self.cols {
            let mut total = [0.0f32; K];
            for (k, t) in total.iter_mut().enumerate() {
                for lane in 0..self.r_lanes {
                    // SAFETY: written before the barrier, inside the scratch as above.
                    *t += unsafe { *scratch.add(k * COLUMN_SCRATCH / 2 + lane * width + j) };
                }
            }
            out(self.col0 + j, total);
        }
    }
}

/// The last pass of a column sum: `out[c] = Σ_g partials[g·stride + c]` for `g < groups`,
/// launched as a column-team grid of one group.
///
/// # Safety
/// `partials` holds `groups` rows of `stride ≥ cols` floats, `out` `cols` values.
#[inline(always)]
pub unsafe fn sum_column_partials<O: Float>(
    partials: *const f32,
    groups: usize,
    cols: usize,
    stride: usize,
    c_lanes: usize,
    out: *mut O::Raw,
) {
    // `stride` is `cols` or a multiple of it: its rows are 16-byte aligned where `cols` is.
    let t = ColumnTeam::new::<f32>(groups, cols, c_lanes, groups);
    t.sum(|g| [t.load::<f32>(partials.add(g * stride))], |c, [s]| O::store(out.add(c), s));
}
