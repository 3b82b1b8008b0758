//! Embedding lookup and its backward pass, for f32, f16 and bf16 tables.
//!
//! Forward (`embedding_*`): `out[i] = table[ids[i]] (+ pos[i % T])`, 16-byte vectors when a row
//! is a whole number of them. Floor: one table row read and one output row written per id, 8 B
//! per f32 output element (16384 ids × 768: 101 MB, ~34 µs at ~3.0 TB/s); 12 B with positions
//! (whose T rows stay in L2).
//!
//! Backward: `dtable[v] = Σ dy[i]` over the i with `ids[i] = v`, accumulated in f32: the same
//! sums in the same order on every run (no float atomics); here in increasing i. The positions i are
//! sorted by the 64-bit key `(id, i)` with a bitonic network (`embedding_sort_tile` sorts tiles
//! of `EMBEDDING_SORT_TILE` keys in shared memory, or finishes a merge stage below the tile's
//! stride; `embedding_sort_step` is one compare-exchange step of a wider stride);
//! `embedding_bucket_starts` finds where each id's run of sorted positions starts;
//! `embedding_bwd_tiles_*` sums each run within each tile of `EMBEDDING_SUM_TILE` sorted positions
//! into an f32 partial row, stored at the run's first position in the tile; and
//! `embedding_bwd_table_*` adds an id's partials in tile order into its table row (zeros for an
//! id that does not occur). Floor: dy read once and the dense `[vocab, C]` gradient written once;
//! the partials add an f32 write and read per dy element. For 16-bit gradients of small
//! vocabularies the host takes `onehotᵀ · dy` instead (`embedding_onehot_b16`, then a matrix
//! product), and the positional gradient `dpos[t] = Σ_b dy[b·T + t]` is a column sum of dy seen
//! as `[n / T, T·C]` (`sum_leading`).
use super::element::{Elem, F32};
use crate::prelude::*;
use crate::shapes::{EMBEDDING_SORT_THREADS as SORT_THREADS, EMBEDDING_SUM_TILE as SUM_TILE};

shared_array!(static EMBEDDING_SUM_KEYS: [u64; 32]);
const _: () = assert!(SUM_TILE == 32);

/// Elements per unit of work along a row: a 16-byte vector when rows are whole vectors, else 1.
#[inline(always)]
fn unit_width<E: Elem>(c: usize) -> usize {
    if c % E::VEC == 0 {
        E::VEC
    } else {
        1
    }
}

/// `w` elements (`unit_width`) from `p`, as f32 (the rest zero).
#[inline(always)]
unsafe fn load_unit<E: Elem>(p: *const E::Bits, w: usize) -> [f32; 8] {
    if w == 1 {
        let mut v = [0.0; 8];
        v[0] = E::load(p);
        v
    } else {
        E::unpack(E::load_vector(p))
    }
}

#[inline(always)]
unsafe fn store_unit<E: Elem>(p: *mut E::Bits, w: usize, v: [f32; 8]) {
    if w == 1 {
        E::store(p, v[0])
    } else {
        E::store_vector(p, E::pack(v))
    }
}

/// `w` f32 of a partial row (16-byte aligned when `w` > 1).
#[inline(always)]
unsafe fn load_partial(p: *const f32, w: usize) -> [f32; 8] {
    let mut v = [0.0; 8];
    if w == 1 {
        v[0] = load_f32(p);
    } else {
        for h in 0..w / 4 {
            let q = load_f32x4(p.add(4 * h)).0;
            v[4 * h..4 * h + 4].copy_from_slice(&q);
        }
    }
    v
}

#[inline(always)]
unsafe fn store_partial(p: *mut f32, w: usize, v: [f32; 8]) {
    if w == 1 {
        store_f32(p, v[0]);
    } else {
        for h in 0..w / 4 {
            store_f32x4(p.add(4 * h), F32x4([v[4 * h], v[4 * h + 1], v[4 * h + 2], v[4 * h + 3]]));
        }
    }
}

#[inline(always)]
fn add8(acc: &mut [f32; 8], v: [f32; 8]) {
    for k in 0..8 {
        acc[k] += v[k];
    }
}

#[inline(always)]
unsafe fn embedding_fwd<E: Elem>(
    table: *const E::Bits,
    ids: *const u32,
    pos: *const E::Bits,
    out: *mut E::Bits,
    n: usize,
    c: usize,
    t: usize,
) {
    let w = unit_width::<E>(c);
    let per_row = c / w;
    for g in grid_stride(n * per_row) {
        let (i, u) = (g / per_row, (g % per_row) * w);
        let mut v = load_unit::<E>(table.add(*ids.add(i) as usize * c + u), w);
        if !pos.is_null() {
            add8(&mut v, load_unit::<E>(pos.add((i % t) * c + u), w));
        }
        store_unit::<E>(out.add(i * c + u), w, v);
    }
}

/// Sorts tiles of `tile` keys (a power of two) in dynamic shared memory (`8 · tile`
/// bytes): from the ids (`k` = 0: key `(ids[g] << 32) | g`, `u64::MAX` past `n`) through every
/// stage up to `tile`, or, for a merge stage `k` > `tile` whose wider strides
/// `embedding_sort_step` did, its strides below `tile`. One block of `SORT_THREADS` per tile.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn embedding_sort_tile(
    ids: *const u32,
    keys: *mut u64,
    n: usize,
    k: usize,
    tile: usize,
) {
    grid_dependency_sync();
    let s = dynamic_shared::<u64>();
    let base = block_x() * tile;
    let t = thread_x();
    let mut h = t;
    while h < tile {
        let g = base + h;
        *s.add(h) = match (k, g < n) {
            (0, true) => (*ids.add(g) as u64) << 32 | g as u64,
            (0, false) => u64::MAX,
            _ => *keys.add(g),
        };
        h += SORT_THREADS;
    }
    sync_threads();
    let (mut stage, last) = if k == 0 { (2, tile) } else { (k, k) };
    while stage <= last {
        let mut j = stage.min(tile) / 2;
        while j > 0 {
            let mut p = t;
            while p < tile / 2 {
                let i = 2 * j * (p / j) + p % j;
                let (a, b) = (*s.add(i), *s.add(i + j));
                if (a > b) == ((base + i) & stage == 0) {
                    *s.add(i) = b;
                    *s.add(i + j) = a;
                }
                p += SORT_THREADS;
            }
            sync_threads();
            j /= 2;
        }
        stage *= 2;
    }
    let mut h = t;
    while h < tile {
        *keys.add(base + h) = *s.add(h);
        h += SORT_THREADS;
    }
}

/// One compare-exchange step (stride `j` of merge stage `k`) over `2 · half` keys.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn embedding_sort_step(keys: *mut u64, half: usize, k: usize, j: usize) {
    grid_dependency_sync();
    for p in grid_stride(half) {
        let i = 2 * j * (p / j) + p % j;
        let (a, b) = (*keys.add(i), *keys.add(i + j));
        if (a > b) == (i & k == 0) {
            *keys.add(i) = b;
            *keys.add(i + j) = a;
        }
    }
}

/// `starts[v]` = the first sorted position whose id is ≥ v, for v in `0..=vocab`.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn embedding_bucket_starts(
    keys: *const u64,
    starts: *mut u32,
    n: usize,
    vocab: usize,
) {
    grid_dependency_sync();
    for p in grid_stride(n + 1) {
        let first = if p == 0 { 0 } else { (*keys.add(p - 1) >> 32) as usize + 1 };
        let last = if p == n { vocab } else { (*keys.add(p) >> 32) as usize };
        for v in first..=last {
            *starts.add(v) = p as u32;
        }
    }
}

/// One block per tile of `SUM_TILE` sorted positions: each run of equal ids within it summed
/// (in position order) into `partials` at the run's first position.
#[inline(always)]
unsafe fn bwd_tiles<E: Elem>(dy: *const E::Bits, keys: *const u64, partials: *mut f32, n: usize, c: usize) {
    let s = shared_ptr(&raw mut EMBEDDING_SUM_KEYS);
    let p0 = block_x() * SUM_TILE;
    let len = SUM_TILE.min(n - p0);
    if thread_x() < len {
        *s.add(thread_x()) = *keys.add(p0 + thread_x());
    }
    sync_threads();
    let w = unit_width::<E>(c);
    let mut u = thread_x() * w;
    while u < c {
        let (mut acc, mut first) = ([0.0f32; 8], 0);
        let mut q0 = 0;
        while q0 < len {
            // Eight rows in flight before the first is added (in position order).
            let mut v = [[0.0f32; 8]; 8];
            unroll!(i in [0, 1, 2, 3, 4, 5, 6, 7] => {
                if q0 + i < len {
                    let row = (*s.add(q0 + i) & 0xffff_ffff) as usize;
                    v[i] = load_unit::<E>(dy.add(row * c + u), w);
                }
            });
            unroll!(i in [0, 1, 2, 3, 4, 5, 6, 7] => {
                let q = q0 + i;
                if q < len {
                    add8(&mut acc, v[i]);
                    if q + 1 == len || *s.add(q + 1) >> 32 != *s.add(q) >> 32 {
                        store_partial(partials.add((p0 + first) * c + u), w, acc);
                        (acc, first) = ([0.0; 8], q + 1);
                    }
                }
            });
            q0 += 8;
        }
        u += block_dim_x() * w;
    }
}

/// One block per id: its partials, in tile order, into its row of the table gradient.
#[inline(always)]
unsafe fn bwd_table<E: Elem>(partials: *const f32, starts: *const u32, dtable: *mut E::Bits, c: usize) {
    let v = block_x();
    let (s, e) = (*starts.add(v) as usize, *starts.add(v + 1) as usize);
    let w = unit_width::<E>(c);
    let mut u = thread_x() * w;
    while u < c {
        let mut acc = [0.0f32; 8];
        let mut p = s;
        while p < e {
            add8(&mut acc, load_partial(partials.add(p * c + u), w));
            p = (p / SUM_TILE + 1) * SUM_TILE;
        }
        store_unit::<E>(dtable.add(v * c + u), w, acc);
        u += block_dim_x() * w;
    }
}

macro_rules! embedding_kernels {
    ($($fwd:ident, $tiles:ident, $table:ident: $e:ty, $bits:ty;)*) => {$(
        /// `out[i] = table[ids[i]] (+ pos[i % t])` for `[n, c]` outputs (`pos` may be null).
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $fwd(
            table: *const $bits,
            ids: *const u32,
            pos: *const $bits,
            out: *mut $bits,
            n: usize,
            c: usize,
            t: usize,
        ) {
            grid_dependency_sync();
            embedding_fwd::<$e>(table, ids, pos, out, n, c, t)
        }
        /// Per-tile run sums of the sorted positions; see the module documentation.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $tiles(
            dy: *const $bits,
            keys: *const u64,
            partials: *mut f32,
            n: usize,
            c: usize,
        ) {
            grid_dependency_sync();
            bwd_tiles::<$e>(dy, keys, partials, n, c)
        }
        /// The table gradient from the run sums, one block per id.
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $table(
            partials: *const f32,
            starts: *const u32,
            dtable: *mut $bits,
            c: usize,
        ) {
            grid_dependency_sync();
            bwd_table::<$e>(partials, starts, dtable, c)
        }
    )*};
}

embedding_kernels! {
    embedding_f32, embedding_bwd_tiles_f32, embedding_bwd_table_f32: F32, f32;
    embedding_f16, embedding_bwd_tiles_f16, embedding_bwd_table_f16: F16, u16;
    embedding_bf16, embedding_bwd_tiles_bf16, embedding_bwd_table_bf16: BF16, u16;
}

/// The one-hot rows of `ids` for the small-vocabulary table gradient (`onehotᵀ · dy`, a
/// matrix product): `out[i][v]` = `one` (1.0's bits in the 16-bit format) where `ids[i] = v`,
/// else 0, for `[n, width]` with `width` a multiple of 8 (≥ every id + 1); a thread per 16-byte
/// vector.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn embedding_onehot_b16(
    ids: *const u32,
    one: u32,
    out: *mut u16,
    n: usize,
    width: usize,
) {
    grid_dependency_sync();
    let per_row = width / 8;
    for g in grid_stride(n * per_row) {
        let (i, v0) = (g / per_row, (g % per_row) * 8);
        // The id's place in this vector (≥ 8 when it lies elsewhere: every word zero).
        let k = (*ids.add(i) as usize).wrapping_sub(v0);
        let word = |j: usize| if k / 2 == j { one << (16 * (k % 2)) } else { 0 };
        store_u32x4(out.add(i * width + v0) as *mut u32, [word(0), word(1), word(2), word(3)]);
    }
}
