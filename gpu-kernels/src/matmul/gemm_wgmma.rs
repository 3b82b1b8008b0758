//! Hopper tensor-core GEMM on f16, bf16 (`wgmma.m64nNk16`) and TF32 (`wgmma.m64n256k8`), f32
//! accumulate, one rounding to the output dtype, fed by TMA: the mma.sync kernels' contract (`c`
//! and `bias` in the input dtype, alpha/beta/bias/activation fused), in the sm_90a module only.
//! TF32 `wgmma` reads K-major operands only from shared memory (`_nt`); for A `[M, K]` · B `[K, N]`
//! the host either transposes B first or runs `_nn` (`_nn_128x64`), which computes Cᵀ = Bᵀ·Aᵀ:
//! B's pieces arrive M-major (boxes of 32 columns × 32 k) and reach `wgmma` as register
//! fragments (`swapped_fragment`: two adjacent columns a thread, one 8-byte conflict-free load a
//! k = 8 step), A's K-major, and the sums go out transposed from registers (`store_transposed`).
//! ptxas allows no fragment load while a `wgmma` is in flight, so those kernels wait for each
//! k-step before loading the next one's fragments (about 12% of the rate of `_nt` on large
//! squares, against a transposed copy of B that costs up to 8 bytes a value of B).
//!
//! Floor: 2·M·N·K flops at the H100's ~990 TFLOP/s dense 16-bit rate (8192³: ≥ 1.11 ms; cuBLAS
//! reaches ~780 TFLOP/s) or ~495 TF32 (≥ 2.2 ms; cuBLAS ~390).
//!
//! Persistent blocks, one per SM, each walking the output tiles `blockIdx.x + i·gridDim.x` (tiles
//! numbered layer by layer, each down groups of `WGMMA_GROUP_M` rows of tiles, then across, so
//! that the blocks working at once share A and B panels in L2). A tile is 128×256, 256×128
//! (`_256x128`), 128×192 (`_128x192`) or 128×320 (`_128x320`): the host takes the one that leaves
//! the busiest SM the least work (N = 384 and 1152 fill whole 192-wide tiles in full waves; the
//! 320-wide tile where its waves end fuller than the others'), or 128×64 (`_128x64`)
//! where the large tiles would leave most SMs idle (four times the tiles instead of split K:
//! no f32 slices through memory and no second kernel). With clusters of two
//! (`cluster` = 2), the blocks of a cluster walk pairs of vertically adjacent tiles of the same
//! columns and each loads half of B's piece of every k-step for both (TMA multicast), so that B
//! crosses L2 once per pair; a stage is then free once the consumers of both blocks have released
//! it (remote arrivals on both blocks' `empty` barriers). Three warpgroups. Warpgroup 0 gives
//! most of its registers away
//! (`setmaxnreg`) and one of its threads issues the TMA copies for every tile of the block in
//! turn: per k-step of 128 bytes (64 16-bit or 32 f32 elements), A's and B's pieces into one of
//! the shared stages (`WGMMA_STAGES` in the room of the 128×256 tile's; the 128×64 tile fits
//! eight), 128-byte swizzled, zero-filled outside the matrices (so any M, N,
//! K works), completion counted on the stage's `full` mbarrier. It runs ahead into the next tile
//! while the consumers finish the last one. Warpgroups 1 and 2 each own half the tile's rows
//! (64 × 256: one `m64n256` per 32 bytes of k; 128 × 128: two `m64n128`; 64 × 192: one
//! `m64n192`; 64 × 64: one `m64n64`; 64 × 320: one `m64n256` and one `m64n64` into a second
//! accumulator array, a 128×64 tile's), wait on `full`, keep
//! one k-step of `wgmma` in flight and release the stage before it on its `empty` mbarrier.
//! K-major operands arrive as one box of 128 bytes of k × rows (8-row swizzle atoms 1024 bytes
//! apart); M/N-major ones (16-bit only) as boxes of 64 rows × 64 k (atoms of 8 k-rows 1024 bytes
//! apart, 64-row boxes 8 KiB apart), which `wgmma` reads transposed.
//!
//! Epilogue: each consumer finishes its sums (alpha, beta·C, bias, activation; a compile-time
//! variant per activation without C, one with C, and a plain `alpha·acc` one; 16-bit bias read
//! from the consumer's shared copy of the tile's columns, 16-bit GELU through `tanh.approx`,
//! pairs rounded in one conversion: the cooperative tile leaves the tensor cores idle during the
//! epilogue, so its instructions count) into 64-row × 128-byte chunks of shared
//! memory (two buffers per warpgroup, 128-byte swizzle: conflict-free), and one of its threads
//! stores each chunk with TMA (clipped at the output's edges), so the stores drain while the
//! next tile's mainloop runs; a buffer is refilled once the store issued two chunks earlier has
//! read it. Outputs whose rows are not 16-byte multiples, and split-K slices, are written straight
//! from registers instead.
//!
//! `_nn_swapped_128x64` (f16, bf16): the `tt` 128×64 kernel computing Cᵀ = Bᵀ·Aᵀ for C = A·B,
//! the sums written transposed from registers (`Operands::OUT_T`), where C = A·B streams one
//! operand (the host's dispatch row 2a).
//!
//! Split-K (thin or few output tiles): layer z = batch·slices + slice runs its slice's k-steps
//! and stores raw f32 sums into a workspace, which `gemm_reduce_*` adds in order.
//!
//! Stream-K (more units than a wave, the last wave part-full): the last `sk_units` units (a
//! wave and the part-wave after it) are one region whose k-steps, tile after tile, are cut into
//! one even range per cluster, so that every cluster finishes at about the same time instead of
//! most idling while a few compute the last part-wave (`Schedule::work`). A tile split between
//! two clusters' ranges is finished by the one that computes its end: the other stores its f32
//! sums in `ws` and counts itself on a flag, and it adds them before the epilogue
//! (`stream_k_merge`), all in the one launch.
//!
//! Exact f32 (`gemm_wgmma_f32x3_nt`, 128×128 tiles) is 3xTF32: the producer also loads A's and
//! B's low parts (the fourth and fifth maps) beside their pieces, in stages twice the size (three
//! of them); each k-step's A_lo·B, A·B_lo and A·B go into fresh accumulators, which the consumers
//! add to a second set of sums in f32 once the k-step's `wgmma` have finished (`PROMOTE`): no
//! tensor-core accumulation spans more than 32 products. Floor: three TF32 products, ~165
//! TFLOP/s of f32. The convolutions' weight gradient makes its low parts in shared memory
//! instead (`Operands::SPLIT_HERE`).
//!
//! Launch: block `WGMMA_THREADS` (PTX `.maxntid` set by build.rs), grid `(cluster · min(units,
//! resident clusters or SMs), 1, 1)` in clusters of `cluster` along x, dynamic shared memory
//! `WGMMA_SHARED_BYTES`; `maps` holds the tensor maps by value (A's, B's, the output's; 3-D:
//! contiguous dimension, rows, batch; boxes as above, the output's 128 bytes × 64 rows; 128-byte
//! swizzle), which TMA reads in the kernel's parameters (`kernel_param_address`).
use super::{activate, epilogue};
use crate::prelude::*;
use crate::shapes::{
    TensorMaps, ACTIVATION_GELU, ACTIVATION_NONE, ACTIVATION_RELU, WGMMA_BIAS_BYTES, WGMMA_CONSUMERS,
    WGMMA_GROUP_M as GROUP_M, WGMMA_MAX_STAGES as MAX_STAGES, WGMMA_MN_BOX as MN_BOX,
    WGMMA_OUT_BYTES as OUT_BYTES, WGMMA_PIECE_FLOATS as PIECE_FLOATS, WGMMA_ROW_BYTES,
    WGMMA_STAGES as STAGES, WGMMA_STAGE_BYTES as STAGE_BYTES, WGMMA_STORE_ROWS, WGMMA_THREADS, WGMMA_TILES,
};
use core::num::NonZeroUsize;

/// One row of a k-step: the 128-byte swizzle width.
const ROW_BYTES: u32 = WGMMA_ROW_BYTES as u32;
/// A 128-byte swizzle atom: 8 rows of 128 bytes.
const ATOM_BYTES: u32 = 8 * ROW_BYTES;
/// The computing warpgroups; one thread of each arrives on a stage's `empty` barrier (a
/// warpgroup's `wgmma` complete together, and 256 arrivals per stage cost shared-memory atomics).
const CONSUMERS: usize = WGMMA_CONSUMERS;
const PRODUCER_REGS: u32 = 40;
const CONSUMER_REGS: u32 = 232;
/// `store_staged`'s activation parameter for the launch's own (the variant with C).
const ACTIVATION_ANY: u32 = u32::MAX;
/// One staged piece of output: 64 rows × 128 bytes, the TMA store's box; each consumer
/// warpgroup has two, filled in turn.
const CHUNK_BYTES: u32 = 64 * ROW_BYTES;

const _: () =
    assert!(ROW_BYTES == 128 && WGMMA_TILES[0].0 == 2 * 64 && WGMMA_TILES[0].1 == 256 && CONSUMERS == 2);
const _: () = assert!(WGMMA_TILES[1].0 == WGMMA_TILES[0].1 && WGMMA_TILES[1].1 == WGMMA_TILES[0].0);
const _: () = assert!(WGMMA_TILES[2].0 == 128 && WGMMA_TILES[2].1 == 192);
// One M/N-major box of B per 128×64 tile: never split between the blocks of a cluster.
const _: () = assert!(WGMMA_TILES[3].0 == 128 && WGMMA_TILES[3].1 == MN_BOX);
// The 128×320 tile: the 128×256 one's products and a 128×64 tile's beside them.
const _: () = assert!(WGMMA_TILES[WIDE].0 == 128 && WGMMA_TILES[WIDE].1 == WGMMA_TILES[0].1 + MN_BOX);
const _: () = assert!(STAGE_BYTES == (WGMMA_TILES[0].0 + WGMMA_TILES[0].1) * WGMMA_ROW_BYTES);
const _: () = assert!(OUT_BYTES == 2 * CONSUMERS * CHUNK_BYTES as usize);
const _: () = assert!(CHUNK_BYTES as usize == WGMMA_STORE_ROWS * WGMMA_ROW_BYTES);

/// `WGMMA_TILES`' 128×320 tile.
const WIDE: usize = 5;
/// The sums a thread holds of the 128×320 tile's tail: a 128×64 tile's.
const TAIL_SUMS: usize = 4 * column_blocks(3).1;

/// Tile `TILE` of `WGMMA_TILES`: 0 is 128×256 (each consumer one `m64n256` per 32 bytes of k),
/// 1 is 256×128 (two `m64n128`), 2 is 128×192 (one `m64n192`), 3 is 128×64 (one `m64n64`),
/// `WIDE` 128×320 (the 128×256 tile's `m64n256` and a 128×64 tile's `m64n64` beside it).
const fn tile(kind: usize) -> (usize, usize) {
    WGMMA_TILES[kind]
}

/// The tiles of a launch and how the blocks walk them. With clusters of two, the blocks of a
/// cluster take vertically adjacent tiles (tile rows 2p and 2p + 1) of the same columns, so that
/// they share B's piece of every k-step (each loads half and multicasts it to both).
///
/// Every divisor of the walk is a `NonZeroUsize`: a division's zero check is a trap, and a trap
/// inside the consumers' tile loop makes ptxas allocate that whole loop within the launch's 168
/// registers instead of the 232 `setmaxnreg` gives them (spills in every epilogue, and no room
/// for more than 128 sums a thread beside the mainloop's other values).
#[derive(Clone, Copy)]
struct Schedule {
    tile: (usize, usize),
    /// Rows of tiles, counted in cluster-high units; columns of tiles.
    units_m: usize,
    tiles_n: usize,
    /// Units in a layer, tile rows in a group of `GROUP_M` (in units) and units in a group.
    per_layer: NonZeroUsize,
    group: NonZeroUsize,
    per_group: NonZeroUsize,
    /// Work units: a unit is `cluster` vertically adjacent tiles; the first `whole` of them run
    /// whole, the rest (`sk_units`) are the stream-K region, walked as `SK_ITEMS` items per
    /// cluster after them (`units` in all).
    units: usize,
    whole: usize,
    sk_units: usize,
    cluster: NonZeroUsize,
    rank: usize,
}

/// `x` as a divisor: 1 for 0, which no launch gives (the host checks every dimension).
#[inline(always)]
fn divisor(x: usize) -> NonZeroUsize {
    NonZeroUsize::new(x).unwrap_or(NonZeroUsize::MIN)
}

/// What a work unit computes: layer z (batch, or batch · slices + slice with split-K), this
/// block's tile origin `(m0, n0)`, k-steps `first_step` to `first_step + steps`, and for a
/// stream-K segment of a tile split between two clusters its region tile · 2 + 1 for the
/// segment that ends the tile (it finishes it) or + 0 for the one that starts it (`WHOLE` for a
/// whole tile, `SKIP` for an item past a cluster's range: one register through the mainloop,
/// where the accumulators leave few).
#[derive(Clone, Copy)]
struct Work {
    z: usize,
    m0: usize,
    n0: usize,
    batch: usize,
    first_step: usize,
    steps: usize,
    piece: u32,
}

/// `Work::piece` of a whole tile, and of no work.
const WHOLE: u32 = u32::MAX;
const SKIP: u32 = u32::MAX - 1;
/// The most tiles a cluster's range of the stream-K region touches: the region is under two
/// waves of units, so a range is under two tiles long.
const SK_ITEMS: usize = 3;

impl Schedule {
    #[inline(always)]
    fn new(
        tile: (usize, usize),
        (m, n): (usize, usize),
        layers: usize,
        (cluster, rank): (usize, usize),
        sk_units: usize,
    ) -> Self {
        let cluster = divisor(cluster);
        let (units_m, tiles_n) = (m.div_ceil(tile.0).div_ceil(cluster.get()), n.div_ceil(tile.1));
        let all = units_m * tiles_n * layers;
        let sk_units = sk_units.min(all);
        let whole = all - sk_units;
        let units = if sk_units > 0 { whole + SK_ITEMS * (grid_dim_x() / cluster) } else { all };
        let group = divisor(GROUP_M / cluster);
        let (per_layer, per_group) = (divisor(units_m * tiles_n), divisor(group.get() * tiles_n));
        Schedule {
            tile,
            units_m,
            tiles_n,
            per_layer,
            group,
            per_group,
            units,
            whole,
            sk_units,
            cluster,
            rank,
        }
    }

    /// This block's first unit and the stride between its units (the cluster's index and count).
    #[inline(always)]
    fn walk(&self) -> (usize, NonZeroUsize) {
        (block_x() / self.cluster, divisor(grid_dim_x() / self.cluster))
    }

    /// Unit `unit`'s work over `all_steps` k-steps in slices of `k_steps` (split-K layers). Past
    /// the whole units, this cluster's items of the stream-K region: the region's k-steps, tile
    /// after tile, cut into one even range per cluster (each at least a tile long, so a tile lies
    /// in one range or is split between two neighbours), whose tiles the cluster takes from its
    /// range's end down, its j-th item the j-th unit it walks past the whole ones. A range's last
    /// tile is its first item (the segment that starts that tile, whose sums the next cluster
    /// adds) and its first tile its last (the segment that ends a tile the previous cluster
    /// started): so the segment each cluster waits for, last, is the first its neighbour
    /// computes, and no cluster waits on one that waits (`stream_k_merge`).
    /// `sk` (a constant of the kernel): it has a stream-K region (else every unit is whole, at no
    /// cost in registers to the kernels without one).
    #[inline(always)]
    fn work(&self, unit: usize, all_steps: usize, k_steps: usize, sk: bool) -> Work {
        if !sk || unit < self.whole {
            let (z, m0, n0) = self.origin(unit);
            let (batch, first_step, steps) = layer_steps(z, all_steps, k_steps);
            return Work { z, m0, n0, batch, first_step, steps, piece: WHOLE };
        }
        let (walker, walkers) = self.walk();
        let back = (unit - self.whole) / walkers;
        let steps = all_steps.max(1);
        let region = self.sk_units * steps;
        let (from, to) = (region * walker / walkers, region * (walker + 1) / walkers);
        if from >= to || back > (to - 1) / steps - from / steps {
            return Work { z: 0, m0: 0, n0: 0, batch: 0, first_step: 0, steps: 0, piece: SKIP };
        }
        let t = (to - 1) / steps - back;
        let (k0, k1) = (from.max(t * steps) - t * steps, to.min((t + 1) * steps) - t * steps);
        let (z, m0, n0) = self.origin(self.whole + t);
        let piece = if k0 == 0 && k1 == steps { WHOLE } else { 2 * t as u32 + u32::from(k0 > 0) };
        Work { z, m0, n0, batch: z, first_step: k0, steps: k1 - k0, piece }
    }

    /// Unit `unit`'s layer z (batch · slices + slice) and this block's tile origin `(m0, n0)`
    /// in it (rows past M for the second block of a cluster at an odd last row: all zero
    /// loads, nothing stored). Units are numbered layer by layer, each down groups of
    /// `GROUP_M` tile rows, then across, so that the blocks working at once share A and B
    /// panels in L2.
    #[inline(always)]
    fn origin(&self, unit: usize) -> (usize, usize, usize) {
        let (z, id) = (unit / self.per_layer, unit % self.per_layer);
        let first_m = id / self.per_group * self.group.get();
        // A unit of the launch always has a row of tiles left: never 0.
        let rows = divisor((self.units_m - first_m).min(self.group.get()));
        let in_group = id % self.per_group;
        let tile_m = (first_m + in_group % rows) * self.cluster.get() + self.rank;
        (z, tile_m * self.tile.0, in_group / rows * self.tile.1)
    }
}

/// What a `wgmma` launch multiplies: plain A and B matrices (`Matrices`), or a convolution's
/// tensors walked tap by tap (`conv::forward_wgmma`, `conv::backward_weight_wgmma`), whose
/// producer issues its own TMA copies and whose forward writes its own outputs.
pub(crate) trait Operands: Copy {
    /// The producer issues `load` instead of the matrices' copies.
    const CONV: bool;
    /// The consumers write through `store` instead of the GEMM's epilogue or split-K workspace.
    const STORES: bool;
    /// 3xTF32 (f32 products from TF32 ones): each piece's low part (what the tensor cores drop
    /// of it) also comes into the stage, `dst.2` bytes after the piece, and the consumers add
    /// A_lo·B and A·B_lo to A·B. A stage then takes twice the room.
    const SPLIT: bool;
    /// Every k-step's products go into fresh accumulators, which the consumers then add to a
    /// second set of sums in f32 (round to nearest): the tensor cores truncate each addition to
    /// their accumulators, an error that grows with the sum's length (3xTF32 loses its f32
    /// accuracy past a few hundred products, perf-notes), while the k-step's own error stays
    /// that of 32 products. Twice the accumulator registers: the 128×128 tile only.
    const PROMOTE: bool = false;
    /// With `SPLIT`: the low parts are made here, not loaded. TMA brings the pieces alone (onto
    /// the stage's `loaded` barrier); warps 1-3 of the producer warpgroup then write each
    /// value's low part (`tf32_low`, the tensor cores truncating the piece itself) `dst.2`
    /// bytes after it and hand the stage to the consumers on `full`. No low parts cross L2, and
    /// no pass before the launch splits the operands.
    const SPLIT_HERE: bool = false;
    /// The product is computed transposed (TF32, the 128×192 and 128×64 tiles): A is stored
    /// M-major, which TF32 `wgmma` cannot read from shared memory, so its fragments come through
    /// registers (`swapped_fragment`), and the sums are written transposed (`store_transposed`).
    /// The host launches Cᵀ = Bᵀ·Aᵀ this way for C = A·B with B N-major, so that neither operand
    /// needs a transposed copy.
    const SWAPPED: bool = false;
    /// The sums are the output's transpose (16-bit C = A·B with B N-major computed as Cᵀ = Bᵀ·Aᵀ
    /// on the `tt` kernel: its B, the caller's A, is then K-major): written transposed straight
    /// from registers (`store_direct`, `transposed`): products streaming a few rows' operand run
    /// 5-25% faster so on the 128×64 tile (the host's `half_swap_pays`).
    const OUT_T: bool = false;
    /// The launch may have a stream-K region (`stream_k`): kernels of their own, so that the
    /// others keep their registers (in every kernel, the region's bookkeeping added spills at the
    /// 168 registers ptxas compiles them under and cost plain products 3-10%).
    const STREAM_K: bool = false;
    /// The producer's place in a unit's k-steps.
    type Walk: Copy;
    /// Where the unit of batch `batch` with its tile at `(m0, n0)` (`rows` tall) starts, at its
    /// k-step `first_step`.
    fn start(&self, batch: usize, first_step: usize, tile: (usize, usize, usize)) -> Self::Walk;
    /// Issue the k-step at `walk`: A's piece into `dst.0`, B's into `dst.1` (with `SPLIT`, their
    /// low parts `dst.2` bytes after each) through the maps at `maps`, all completing on `bar`;
    /// returns the next k-step's place.
    ///
    /// # Safety
    /// As `tma_load_3d` for the maps at `maps`; the stage at `dst` is free.
    unsafe fn load(&self, walk: Self::Walk, dst: (u32, u32, u32), maps: *const u8, bar: u32) -> Self::Walk;
    /// Write a consumer's finished sums of layer `tile.2`: rows from `origin.0` of the tile at
    /// row `tile.0` (`tile.1` tall), columns from `origin.1`, into `out.0` with `out.1` (a bias,
    /// or null).
    ///
    /// # Safety
    /// `out` is as the operands' kernel documents.
    #[inline(always)]
    unsafe fn store<const TILE: usize>(
        &self,
        _acc: &WgmmaAcc,
        _out: (*mut f32, *const f32),
        _origin: (usize, usize),
        _tile: (usize, usize, usize),
    ) {
    }
}

/// Plain A and B matrices, read and written by the GEMM's own code; `SPLIT`: f32 ones as
/// 3xTF32, their low parts through the fourth and fifth maps (after the output's), every k-step's
/// sums promoted to f32 registers; `SWAPPED`, `OUT_T`, `SK`: as `Operands::SWAPPED`,
/// `Operands::OUT_T`, `Operands::STREAM_K`.
#[derive(Clone, Copy)]
pub(crate) struct Matrices<const SPLIT: bool, const SWAPPED: bool, const OUT_T: bool, const SK: bool>;

impl<const SPLIT: bool, const SWAPPED: bool, const OUT_T: bool, const SK: bool> Operands
    for Matrices<SPLIT, SWAPPED, OUT_T, SK>
{
    const CONV: bool = false;
    const STORES: bool = false;
    const SPLIT: bool = SPLIT;
    const PROMOTE: bool = SPLIT;
    const SWAPPED: bool = SWAPPED;
    const OUT_T: bool = OUT_T;
    const STREAM_K: bool = SK;
    type Walk = ();
    #[inline(always)]
    fn start(&self, _: usize, _: usize, _: (usize, usize, usize)) {}
    #[inline(always)]
    unsafe fn load(&self, _: (), _: (u32, u32, u32), _: *const u8, _: u32) {}
}

/// Layer z's k-steps: `(batch, first step, steps)` (split-K: layer z is (batch, slice); slice s
/// runs k-steps [s·k_steps, (s+1)·k_steps)).
#[inline(always)]
fn layer_steps(z: usize, all_steps: usize, k_steps: usize) -> (usize, usize, usize) {
    let slices = all_steps.div_ceil(k_steps.max(1)).max(1);
    let first = z % slices * k_steps;
    (z / slices, first, k_steps.min(all_steps.saturating_sub(first)))
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm<E: WgmmaInput, const TA: bool, const TB: bool, const TILE: usize, O: Operands>(
    maps: *const u8,
    (c, bias, out): (*const E::Elem, *const E::Elem, *mut E::Elem),
    (m, n, k): (usize, usize, usize),
    stride_c: usize,
    (alpha, beta, activation): (f32, f32, u32),
    (batched_a, batched_b): (u32, u32),
    (k_steps, ws): (usize, *mut f32),
    (layers, tma_store, cluster): (usize, bool, usize),
    stream_k: (usize, *mut u32),
    operands: O,
) {
    // The promoted sums fit the registers beside the k-step's (64 a thread, the 128×128 tile).
    const { assert!(!O::PROMOTE || column_blocks(TILE).1 <= 16) };
    // The 128×320 tile: plain 16-bit products only.
    const { assert!(TILE != WIDE || !(O::CONV || O::SPLIT || O::PROMOTE || O::SWAPPED || O::STREAM_K)) };
    // The swapped product: TF32 on the 128×192 or 128×64 tile (3xTF32: 128×64), A M-major (its
    // fragments), B K-major.
    const { assert!(!O::SWAPPED || (TA && TB && (TILE == 2 || TILE == 3) && (!O::SPLIT || TILE == 3))) };
    let (bm, bn) = tile(TILE);
    let t = thread_x();
    let rank = if cluster > 1 { cluster_rank() } else { 0 };
    let sk_units = if O::STREAM_K { stream_k.0 } else { 0 };
    let sched = Schedule::new((bm, bn), (m, n), layers, (cluster, rank as usize), sk_units);
    // Elements of k per stage (one 128-byte row).
    let bk = WGMMA_ROW_BYTES / core::mem::size_of::<E::Elem>();
    // An M/N-major piece comes in boxes of 128 bytes of rows (`bk` of them) × the k-step's `bk`
    // k-rows (16-bit: 64 × 64, f32: 32 × 32).
    let (mn_box, mn_box_bytes) = (bk, (bk * WGMMA_ROW_BYTES) as u32);
    let all_steps = k.div_ceil(bk);
    let base = (shared_addr(dynamic_shared::<u8>()) + ATOM_BYTES - 1) & !(ATOM_BYTES - 1);
    // A stage holds the tile's pieces of one k-step (3xTF32: also their low parts, `lo` bytes
    // on); as many stages as fit the room of `STAGES` stages of the largest tiles, at most
    // `MAX_STAGES` (compile-time constants per kernel, so the ring's index stays a mask or a
    // constant division). The GEMM's 128×64 tile gets eight: bf16 (8192, 8192, 128) 0.082 →
    // 0.066 ms. The convolutions' plain stages keep the room of a 128×256 tile's (four): the
    // TF32 weight gradient's 128×64 tile lost 26% with eight at the seed layer.
    let lo = ((bm + bn) * WGMMA_ROW_BYTES) as u32;
    let stage_bytes = if O::SPLIT {
        2 * lo as usize
    } else if O::CONV {
        STAGE_BYTES
    } else {
        lo as usize
    };
    let stages = (STAGES * STAGE_BYTES / stage_bytes).min(MAX_STAGES);
    let stage = |s: usize| base + (s * stage_bytes) as u32;
    let chunk_buf =
        |wg: u32, b: usize| base + (STAGES * STAGE_BYTES) as u32 + (2 * wg + b as u32) * CHUNK_BYTES;
    let barriers = base + (STAGES * STAGE_BYTES + OUT_BYTES) as u32;
    let full = |s: usize| barriers + 8 * s as u32;
    // Each consumer's copy of a 16-bit bias for its tile's columns.
    let bias_buf = |wg: u32| barriers + (16 * MAX_STAGES) as u32 + wg * WGMMA_BIAS_BYTES as u32;
    let empty = |s: usize| barriers + 8 * (MAX_STAGES + s) as u32;
    // `SPLIT_HERE`: where TMA's copies complete, in the `full` barriers' upper half (a split
    // stage takes twice the room: at most half of `MAX_STAGES` of them).
    const {
        assert!(
            STAGES * STAGE_BYTES / (2 * (WGMMA_TILES[3].0 + WGMMA_TILES[3].1) * WGMMA_ROW_BYTES)
                <= MAX_STAGES / 2
        )
    };
    let loaded = |s: usize| if O::SPLIT_HERE { full(MAX_STAGES / 2 + s) } else { full(s) };
    let a_bytes = (bm * WGMMA_ROW_BYTES) as u32;
    if t == 0 {
        for s in 0..stages {
            mbarrier_init(full(s), 1);
            if O::SPLIT_HERE {
                mbarrier_init(loaded(s), 1);
            }
            // With a cluster, each block's copies land in both blocks' stages: a stage is free
            // when the consumers of both have released it.
            mbarrier_init(empty(s), (CONSUMERS * cluster) as u32);
        }
        fence_mbarrier_init();
    }
    if cluster > 1 {
        cluster_sync();
    } else {
        sync_threads();
    }
    let (first_unit, walkers) = sched.walk();
    let unit_stride = walkers.get();

    if t < 128 {
        setmaxnreg_dec::<PRODUCER_REGS>();
        if t == 0 {
            let (map_a, map_b) = (maps, maps.add(128));
            // B's rows of its piece that this block loads: all, or half for both blocks of a
            // cluster. Worked out once, not per k-step: the path from a freed stage to its refill
            // bounds the bytes in flight of products that stream an operand (perf-notes,
            // twenty-ninth session).
            let (b_first, b_rows) = if cluster > 1 { (bn / 2 * rank as usize, bn / 2) } else { (0, bn) };
            // k-steps issued so far, over every tile of this block: stage and phase.
            let mut it = 0usize;
            let mut unit = first_unit;
            while unit < sched.units {
                let Work { m0, n0, batch, first_step, steps, .. } =
                    sched.work(unit, all_steps, k_steps, O::STREAM_K);
                let (za, zb) = ((batch as u32 * batched_a) as i32, (batch as u32 * batched_b) as i32);
                let mut walk = operands.start(batch, first_step, (m0, n0, bm));
                for step in 0..steps {
                    let s = it % stages;
                    if it >= stages {
                        // The consumers are done with what this stage held `stages` steps ago.
                        mbarrier_wait(empty(s), ((it / stages - 1) & 1) as u32);
                    }
                    // A's and B's pieces (less than the stage holds for the 128×192 tile), and
                    // their low parts for 3xTF32.
                    // With `SPLIT`, the low parts too (swapped: B's only).
                    let low_rows = match (O::SPLIT, O::SPLIT_HERE, O::SWAPPED) {
                        (false, _, _) | (true, true, _) => 0,
                        (true, false, false) => bm + bn,
                        (true, false, true) => bn,
                    };
                    mbarrier_arrive_expect_tx(loaded(s), ((bm + bn + low_rows) * WGMMA_ROW_BYTES) as u32);
                    let (a_dst, b_dst) = (stage(s), stage(s) + a_bytes);
                    let k0 = ((first_step + step) * bk) as i32;
                    if O::CONV {
                        walk = operands.load(walk, (a_dst, b_dst, lo), maps, loaded(s));
                        it += 1;
                        continue;
                    }
                    // A's (`with_a`) and B's pieces through `map_a` and `map_b`, into the stage at
                    // `offset`.
                    let pieces = |map_a: *const u8, map_b: *const u8, offset: u32, with_a: bool| {
                        let (a_dst, b_dst) = (a_dst + offset, b_dst + offset);
                        if with_a && TA {
                            for j in 0..bm / mn_box {
                                let at = ((m0 + j * mn_box) as i32, k0, za);
                                tma_load_3d(a_dst + j as u32 * mn_box_bytes, map_a, full(s), at);
                            }
                        } else if with_a {
                            tma_load_3d(a_dst, map_a, full(s), (k0, m0 as i32, za));
                        }
                        // B: this block's share.
                        let load_b = |dst: u32, at: (i32, i32, i32)| {
                            if cluster > 1 {
                                tma_load_3d_multicast(dst, map_b, full(s), at, 0b11);
                            } else {
                                tma_load_3d(dst, map_b, full(s), at);
                            }
                        };
                        if TB {
                            // The 128×320 tile's share in boxes of half the tile (a TMA box
                            // spans at most 256 rows).
                            let box_rows = if TILE == WIDE { bn / 2 } else { b_rows };
                            for j in 0..b_rows / box_rows {
                                let first = b_first + j * box_rows;
                                load_b(
                                    b_dst + (first * WGMMA_ROW_BYTES) as u32,
                                    (k0, (n0 + first) as i32, zb),
                                );
                            }
                        } else {
                            // Its boxes by a constant trip count: no loop to set up per k-step.
                            for j in 0..bn / mn_box {
                                if (b_first..b_first + b_rows).contains(&(j * mn_box)) {
                                    let at = ((n0 + j * mn_box) as i32, k0, zb);
                                    load_b(b_dst + j as u32 * mn_box_bytes, at);
                                }
                            }
                        }
                    };
                    pieces(map_a, map_b, 0, true);
                    if O::SPLIT {
                        pieces(maps.add(3 * 128), maps.add(4 * 128), lo, !O::SWAPPED);
                    }
                    it += 1;
                }
                unit += unit_stride;
            }
        } else if O::SPLIT_HERE && t >= 32 {
            // Warps 1-3: each k-step's low parts, `lo` bytes after its pieces (a 128-byte
            // swizzle repeats every 1024 bytes, so value i's low part is at i's offset + `lo`).
            const SPLITTERS: u32 = 96;
            let mut it = 0usize;
            let mut unit = first_unit;
            while unit < sched.units {
                for _ in 0..sched.work(unit, all_steps, k_steps, O::STREAM_K).steps {
                    let s = it % stages;
                    mbarrier_wait(loaded(s), ((it / stages) & 1) as u32);
                    // Four vectors a thread in flight: one shared-memory latency per four.
                    let (end, stride) = (stage(s) + lo, SPLITTERS * 16);
                    let mut at = stage(s) + (t as u32 - 32) * 16;
                    while at < end {
                        let mut v = [[0.0f32; 4]; 4];
                        unroll!(i in [0, 1, 2, 3] => {
                            if at + i as u32 * stride < end {
                                v[i] = load_shared_f32x4(at + i as u32 * stride);
                            }
                        });
                        unroll!(i in [0, 1, 2, 3] => {
                            if at + i as u32 * stride < end {
                                store_shared_f32x4(at + i as u32 * stride + lo, v[i].map(tf32_low));
                            }
                        });
                        at += 4 * stride;
                    }
                    fence_proxy_async_shared();
                    named_barrier_sync::<3, SPLITTERS>();
                    if t == 32 {
                        mbarrier_arrive(full(s));
                    }
                    it += 1;
                }
                unit += unit_stride;
            }
        }
    } else {
        setmaxnreg_inc::<CONSUMER_REGS>();
        let release = |s: usize| {
            if cluster > 1 {
                mbarrier_arrive_cluster(empty(s), 0);
                mbarrier_arrive_cluster(empty(s), 1);
            } else {
                mbarrier_arrive(empty(s));
            }
        };
        let wg = (t / 128 - 1) as u32;
        let leader = t % 128 == 0;
        let map_out = maps.add(256);
        // Rows of the tile per consumer, and the first of this one's.
        let rows_wg = bm / CONSUMERS;
        let (swapped_row, frag_lo, frag_hi) = if O::SWAPPED { swapped_fragment(wg) } else { (0, 0, 0) };
        let mut it = 0usize;
        // Chunks this warpgroup has stored: which of its two buffers comes next.
        let mut chunks = 0usize;
        let mut unit = first_unit;
        while unit < sched.units {
            let Work { z, m0, n0, batch, steps, piece, .. } =
                sched.work(unit, all_steps, k_steps, O::STREAM_K);
            if O::STREAM_K && piece == SKIP {
                unit += unit_stride;
                continue;
            }
            let mut acc: WgmmaAcc = [0.0; 128];
            // The 128×320 tile's last 64 columns, laid out as a 128×64 tile's sums (the first
            // `TAIL_SUMS`; the rest never written, never live).
            let mut tail: WgmmaAcc = [0.0; 128];
            // The tail's sums tied in place at the fences and waits, as those tie `acc`.
            let pin_tail = |tail: &mut WgmmaAcc| {
                if let Some(sums) = tail.first_chunk_mut::<TAIL_SUMS>() {
                    pin_values(sums);
                }
            };
            // With `PROMOTE`, the tile's sums; `acc` then holds one k-step's.
            let mut sums: WgmmaAcc = [0.0; 128];
            // Swapped: each k-step's four A fragments (k = 8 each, one swizzle atom apart) read
            // into registers, then its four `wgmma`, waited for before the next k-step's loads;
            // the other consumer's `wgmma` keep the tensor cores busy meanwhile. Loading the next
            // k-step's fragments during this one's `wgmma` (two fragment sets, k-steps in pairs)
            // compiles pipelined since the consumers get their 232 registers (`Schedule`), but
            // measured 2-4% faster at 6144³-8192³ and ~20% slower at (128, 8192, 8192) (H100,
            // thirty-third session, branch `exp/tf32-pipe`), so it is not used.
            for _ in 0..if O::SWAPPED { steps } else { 0 } {
                let s = it % stages;
                mbarrier_wait(full(s), ((it / stages) & 1) as u32);
                let (a_s, b_s) = (stage(s), stage(s) + a_bytes);
                // The fragments, and with `SPLIT` their low parts (`tf32_low`, as the host splits
                // a K-major operand).
                let (mut frags, mut lows) = ([[0u32; 4]; 4], [[0u32; 4]; 4]);
                unroll!(kk in [0, 1, 2, 3] => {
                    let first = Tf32::load_shared_pair(a_s + kk as u32 * ATOM_BYTES + frag_lo);
                    let last = Tf32::load_shared_pair(a_s + kk as u32 * ATOM_BYTES + frag_hi);
                    let x = [first[0], first[1], last[0], last[1]];
                    frags[kk] = x.map(f32::to_bits);
                    if O::SPLIT {
                        lows[kk] = x.map(|v| tf32_low(v).to_bits());
                    }
                });
                wgmma_fence(&mut acc);
                let product = #[inline(always)]
                |acc: &mut WgmmaAcc, frags: &[[u32; 4]; 4], b_s: u32| {
                    unroll!(kk in [0, 1, 2, 3] => {
                        let b = sw128_descriptor(b_s + kk as u32 * 32, 16, ATOM_BYTES);
                        match TILE {
                            2 => wgmma_n192_tf32_rs(acc, frags[kk], b),
                            _ => wgmma_n64_tf32_rs(acc, frags[kk], b),
                        }
                    });
                };
                if O::SPLIT {
                    // 3xTF32, the small terms first: A_lo·B, then A·B_lo (B's low part in its
                    // half of the stage).
                    product(&mut acc, &lows, b_s);
                    product(&mut acc, &frags, b_s + lo);
                }
                product(&mut acc, &frags, b_s);
                wgmma_commit();
                wgmma_wait::<0>(&mut acc);
                if leader {
                    release(s);
                }
                if O::PROMOTE {
                    promote::<TILE>(&mut sums, &mut acc);
                }
                it += 1;
            }
            // The shared-memory products (every kernel but the swapped one).
            for step in 0..if O::SWAPPED { 0 } else { steps } {
                let s = it % stages;
                mbarrier_wait(full(s), ((it / stages) & 1) as u32);
                let (a_s, b_s) = (stage(s), stage(s) + a_bytes);
                if TILE == WIDE {
                    pin_tail(&mut tail);
                }
                wgmma_fence(&mut acc);
                // A · B over the k-step, from A's and B's pieces at `a_s` and `b_s`.
                let product = #[inline(always)]
                |acc: &mut WgmmaAcc, tail: &mut WgmmaAcc, a_s: u32, b_s: u32| {
                    unroll!(kk in [0, 1, 2, 3] => {
                        let kk = kk as u32;
                        // k-steps of 32 bytes: along a K-major row (the descriptor's swizzle follows
                        // the absolute address), 16 rows = 2 atoms down an M/N-major box. Rows `row`
                        // to `row + 63` of the tile: one `m64` product.
                        let a = |row: u32| if TA {
                            sw128_descriptor(a_s + row / 64 * mn_box_bytes + kk * 2 * ATOM_BYTES, mn_box_bytes, ATOM_BYTES)
                        } else {
                            sw128_descriptor(a_s + row * ROW_BYTES + kk * 32, 16, ATOM_BYTES)
                        };
                        // B's rows (or boxes of columns) from `b_s`: the 128×320 tile's last 64
                        // columns start 256 rows (four boxes) on either way.
                        let b_at = |b_s: u32| if TB {
                            sw128_descriptor(b_s + kk * 32, 16, ATOM_BYTES)
                        } else {
                            sw128_descriptor(b_s + kk * 2 * ATOM_BYTES, mn_box_bytes, ATOM_BYTES)
                        };
                        let b = b_at(b_s);
                        let row = wg * rows_wg as u32;
                        match TILE {
                            0 => E::wgmma_k32_bytes(acc, a(row), b, TA, !TB),
                            1 => {
                                E::wgmma_n128_k32_bytes::<0>(acc, a(row), b, TA, !TB);
                                E::wgmma_n128_k32_bytes::<1>(acc, a(row + 64), b, TA, !TB);
                            }
                            2 => E::wgmma_n192_k32_bytes(acc, a(row), b, TA, !TB),
                            3 => E::wgmma_n64_k32_bytes(acc, a(row), b, TA, !TB),
                            WIDE => {
                                E::wgmma_k32_bytes(acc, a(row), b, TA, !TB);
                                let tail_b = b_at(b_s + (tile(0).1 * WGMMA_ROW_BYTES) as u32);
                                E::wgmma_n64_k32_bytes(tail, a(row), tail_b, TA, !TB);
                            }
                            _ => E::wgmma_n128_k32_bytes::<0>(acc, a(row), b, TA, !TB),
                        }
                    });
                };
                if O::SPLIT {
                    // 3xTF32: A_lo·B and A·B_lo (each low part in its half of the stage) before
                    // A·B, the small terms first.
                    product(&mut acc, &mut tail, a_s + lo, b_s);
                    product(&mut acc, &mut tail, a_s, b_s + lo);
                }
                product(&mut acc, &mut tail, a_s, b_s);
                wgmma_commit();
                if O::PROMOTE {
                    // This k-step's sums, added in f32; its stage is free once they are final.
                    wgmma_wait::<0>(&mut acc);
                    if leader {
                        release(s);
                    }
                    promote::<TILE>(&mut sums, &mut acc);
                } else {
                    // The previous k-step's wgmma have finished: its stage may be refilled.
                    wgmma_wait::<1>(&mut acc);
                    if TILE == WIDE {
                        pin_tail(&mut tail);
                    }
                    if step > 0 && leader {
                        release((it - 1) % stages);
                    }
                }
                it += 1;
            }
            if !O::PROMOTE && !O::SWAPPED {
                wgmma_wait::<0>(&mut acc);
                if TILE == WIDE {
                    pin_tail(&mut tail);
                }
                if leader {
                    // This tile's last stage (the loop released the ones before it).
                    release((it - 1) % stages);
                }
            }
            let acc = if O::PROMOTE { &mut sums } else { &mut acc };
            if O::STREAM_K && piece != WHOLE {
                let slot =
                    ((piece / 2) as usize * sched.cluster.get() + sched.rank) * CONSUMERS + wg as usize;
                if !stream_k_merge::<TILE>(acc, (ws, stream_k.1), (slot, wg), piece % 2 == 1) {
                    unit += unit_stride;
                    continue;
                }
            }
            // With a stream-K region, `ws` holds its segments' sums: no split-K slices.
            let split = !ws.is_null() && !O::STREAM_K;
            let acc = &*acc;
            let origin = (m0 + wg as usize * rows_wg, n0);
            let out_ctx = (alpha, beta, activation);
            // C of this batch, read only when `beta` counts (the fused epilogues).
            let has_c = !c.is_null() && beta != 0.0;
            let c = if has_c { c.add(batch * stride_c) } else { c };
            let none = core::ptr::null::<E::Elem>();
            // The epilogue of sums laid out as tile kind `$tile`'s, at `$origin` (the 128×320
            // tile runs it for its 128×256 part, then for its tail as a 128×64 tile's).
            macro_rules! finish {
                ($acc:expr, $tile:tt, $origin:expr) => {{
                    let acc: &WgmmaAcc = $acc;
                    let origin: (usize, usize) = $origin;
                    if O::STORES {
                        operands.store::<$tile>(
                            acc,
                            (out.cast::<f32>(), bias.cast::<f32>()),
                            origin,
                            (m0, bm, z),
                        );
                    } else if O::SWAPPED {
                        let place = ((m, n), (m0, n0), swapped_row);
                        if !split {
                            store_transposed::<E, $tile, false>(
                                acc,
                                out.add(batch * m * n),
                                (c, bias),
                                place,
                                out_ctx,
                            );
                        } else {
                            store_transposed::<E, $tile, true>(
                                acc,
                                ws.add(z * m * n),
                                (none, none),
                                place,
                                out_ctx,
                            );
                        }
                    } else if split {
                        // One slice of a split-K product: the raw sums, reduced and finished by
                        // `gemm_reduce_*`.
                        let raw = (1.0, 0.0, 0);
                        store_direct::<E, $tile, true>(
                            acc,
                            ws.add(z * m * n),
                            (none, none),
                            (m, n),
                            origin,
                            raw,
                            O::OUT_T,
                        );
                    } else if tma_store && !O::OUT_T {
                        let staged = (map_out, batch, (chunk_buf(wg, 0), chunk_buf(wg, 1), bias_buf(wg)), wg);
                        // The epilogue's variant is known per launch: each its own straight-line code
                        // (with C, the rarer residual form, one variant for every activation).
                        let plain = !has_c && bias.is_null() && activation == ACTIVATION_NONE;
                        let args = ((c, bias), (m, n), origin, out_ctx, staged);
                        let chunks = &mut chunks;
                        match activation {
                            _ if plain => {
                                store_staged::<E, $tile, true, false, ACTIVATION_NONE>(acc, args, chunks)
                            }
                            _ if has_c => {
                                store_staged::<E, $tile, false, true, ACTIVATION_ANY>(acc, args, chunks)
                            }
                            ACTIVATION_RELU => {
                                store_staged::<E, $tile, false, false, ACTIVATION_RELU>(acc, args, chunks)
                            }
                            ACTIVATION_GELU => {
                                store_staged::<E, $tile, false, false, ACTIVATION_GELU>(acc, args, chunks)
                            }
                            _ => store_staged::<E, $tile, false, false, ACTIVATION_NONE>(acc, args, chunks),
                        }
                    } else {
                        let out = out.add(batch * m * n);
                        store_direct::<E, $tile, false>(
                            acc,
                            out,
                            (c, bias),
                            (m, n),
                            origin,
                            out_ctx,
                            O::OUT_T,
                        );
                    }
                }};
            }
            if TILE == WIDE {
                finish!(acc, 0, origin);
                finish!(&tail, 3, (origin.0, origin.1 + tile(0).1));
            } else {
                finish!(acc, TILE, origin);
            }
            unit += unit_stride;
        }
        if tma_store && leader {
            bulk_wait_all();
        }
    }
    if cluster > 1 {
        // Neither block leaves while the other may still arrive on its barriers.
        cluster_sync();
    }
}

/// `gemm`'s `stream_k` for launches without a stream-K tail (the convolutions').
pub(crate) const NO_STREAM_K: (usize, *mut u32) = (0, core::ptr::null_mut());

/// Stream-K: join the two segments of a tile split between two clusters, for consumer warpgroup
/// `wg` (`slot`: the region tile of this block and this consumer). The segment that starts the tile
/// stores the sums `acc` in the slot's room of `partials` (vector j of thread t at `(j·128 +
/// t)·4`: each warp stores whole lines) and counts itself on the slot's flag in `flags`; the one
/// that ends it (`ends`) waits for the count, adds those sums, leaves the flag zero again for the
/// next launch, and returns true: it finishes the tile. What it waits for is the first segment
/// its neighbour of lower index computes, and the grid is persistent (all its blocks resident,
/// `Schedule::work`); where other launches hold SMs, blocks start in index order (as CUTLASS's
/// stream-K relies on too) and the range of cluster 0 starts on a tile, so the lowest waiting
/// cluster's neighbour is running.
///
/// # Safety
/// `partials` holds `PIECE_FLOATS` floats per slot; `flags` one zeroed u32 per slot, which no
/// other running launch uses; every thread of the warpgroup calls it.
#[inline(always)]
unsafe fn stream_k_merge<const TILE: usize>(
    acc: &mut WgmmaAcc,
    (partials, flags): (*mut f32, *mut u32),
    (slot, wg): (usize, u32),
    ends: bool,
) -> bool {
    let tw = thread_x() % 128;
    let vectors = column_blocks(TILE).1;
    let flag = flags.add(slot);
    let room = |j: usize| partials.add(slot * PIECE_FLOATS + (j * 128 + tw) * 4);
    if !ends {
        unroll!(j in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
                      16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31] => {
            if j < vectors {
                store_f32x4(room(j), F32x4([acc[4 * j], acc[4 * j + 1], acc[4 * j + 2], acc[4 * j + 3]]));
            }
        });
        // Every thread's stores come before the leader's release.
        named_barrier::<128>(1 + wg);
        if tw == 0 {
            fence_gpu();
            atomic_add_u32(flag, 1);
        }
        return false;
    }
    if tw == 0 {
        while load_acquire_u32(flag) == 0 {}
        atomic_add_u32(flag, u32::MAX);
    }
    named_barrier::<128>(1 + wg);
    unroll!(j in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
                  16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31] => {
        if j < vectors {
            let v = load_l2_f32x4(room(j)).0;
            unroll!(e in [0, 1, 2, 3] => {
                acc[4 * j + e] += v[e];
            });
        }
    });
    true
}

/// `PROMOTE`: add a k-step's sums `acc` to the tile's `sums` in f32 and clear them for the next.
#[inline(always)]
fn promote<const TILE: usize>(sums: &mut WgmmaAcc, acc: &mut WgmmaAcc) {
    unroll!(i in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] => {
        if i < column_blocks(TILE).1 {
            unroll!(e in [0, 1, 2, 3] => {
                sums[4 * i + e] += acc[4 * i + e];
                acc[4 * i + e] = 0.0;
            });
        }
    });
}

/// 8-column blocks of a consumer's accumulators per `m64` product, and in all (32 but for the
/// 128×192 tile's 24 and the 128×64 tile's 8: the rest of [`WgmmaAcc`] stays unused).
const fn column_blocks(kind: usize) -> (usize, usize) {
    let blocks = tile(kind).1 / 8;
    (blocks, blocks * tile(kind).0 / CONSUMERS / 64)
}

/// Call `f(row, col, a0, a1)` for each pair of this thread's accumulators: elements (row, col)
/// and (row, col + 1) of C, for the warpgroup's rows from `origin` (`m64` products below each
/// other in the 256×128 tile).
#[inline(always)]
pub(crate) fn for_each_pair<const TILE: usize>(
    acc: &WgmmaAcc,
    origin: (usize, usize),
    mut f: impl FnMut(usize, usize, f32, f32),
) {
    let tw = thread_x() % 128;
    let (g, q) = (tw % 32 / 4, tw % 4);
    let row0 = origin.0 + tw / 32 * 16 + g;
    let (blocks, total) = column_blocks(TILE);
    unroll!(j in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
                  16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31] => {
        if j < total {
            let col = origin.1 + 8 * (j % blocks) + 2 * q;
            unroll!(h in [0, 1] => {
                f(row0 + 64 * (j / blocks) + 8 * h, col, acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
            });
        }
    });
}

/// The fused epilogue of element (row, col) of a `[m, n]` output from its sum `a`: `c` (offset
/// to the batch) is read only when `has_c`, and only inside the output.
#[inline(always)]
unsafe fn finish<E: WgmmaInput>(
    a: f32,
    (row, col): (usize, usize),
    (c, has_c, bias): (*const E::Elem, bool, *const E::Elem),
    (m, n): (usize, usize),
    (alpha, beta, activation): (f32, f32, u32),
) -> f32 {
    let beta_c =
        if has_c && row < m && col < n { beta * E::widen(E::load_elem(c.add(row * n + col))) } else { 0.0 };
    let b = if !bias.is_null() && col < n { E::widen(E::load_elem(bias.add(col))) } else { 0.0 };
    epilogue(a, alpha, beta_c, b, activation)
}

/// Where a swapped product's A fragments lie (`Operands::SWAPPED`), for consumer `wg`. A's
/// pieces are M-major: 4 KB boxes of 32 rows × 32 k-rows of 128 bytes, 128-byte swizzle (16-byte
/// unit u of k-row r at u ^ (r mod 8)). Which tile row each fragment row stands for is free, as
/// long as the store follows: fragment rows g and g + 8 of a warp are two adjacent tile rows (one
/// 8-byte load gives both), and the half-warps' rows lie in units u and u ^ 4, so that the four
/// k-rows a load touches (k = t) hit all 32 banks once. Returns the tile row of this thread's
/// fragment row g (g + 8 is the next row), and the stage offsets of its loads at k = t and k = t + 4
/// of the k-step's first 8 (the next 8 are one swizzle atom on).
#[inline(always)]
fn swapped_fragment(wg: u32) -> (u32, u32, u32) {
    let tw = thread_x() as u32 % 128;
    let (w, g, t) = (tw / 32, tw % 32 / 4, tw % 4);
    let unit = g / 4 + 4 * (g % 4 / 2) + 2 * (w % 2);
    let pair = 2 * (g % 2);
    let piece = 2 * wg + w / 2;
    let at = |k: u32| piece * 32 * ROW_BYTES + k * ROW_BYTES + (unit ^ k) * 16 + pair * 4;
    (32 * piece + 4 * unit + pair, at(t), at(t + 4))
}

/// Write a swapped product's piece (`Operands::SWAPPED`) straight from registers: the kernel's
/// `[m, n]` sums are the transpose of the `[n, m]` output, so the tile's element (r, c) at
/// `(m0, n0)` goes to output row n0 + c, column m0 + r (`c` and `bias` in the output's terms). A
/// thread's two fragment rows are adjacent output columns from `row` on (`swapped_fragment`),
/// stored as a pair. `RAW`: a split-K slice's raw f32 sums into its workspace `out`.
#[inline(always)]
unsafe fn store_transposed<E: WgmmaInput, const TILE: usize, const RAW: bool>(
    acc: &WgmmaAcc,
    out: *mut impl Copy,
    (c, bias): (*const E::Elem, *const E::Elem),
    ((m, n), (m0, n0), row): ((usize, usize), (usize, usize), u32),
    (alpha, beta, activation): (f32, f32, u32),
) {
    let has_c = !c.is_null() && beta != 0.0;
    let col = m0 + row as usize;
    if col >= m {
        return;
    }
    let second = col + 1 < m;
    let pairs = m % 2 == 0;
    let t = thread_x() as usize % 4;
    let blocks = column_blocks(TILE).1;
    unroll!(j in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
                  16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31] => {
        unroll!(e in [0, 1] => {
            let r = n0 + 8 * j + 2 * t + e;
            if j < blocks && r < n {
                let ctx = ((c, has_c, bias), (n, m), (alpha, beta, activation));
                store_pair::<E, RAW>(out, (acc[4 * j + e], acc[4 * j + 2 + e]), (r, col), (second, pairs), ctx);
            }
        });
    });
}

/// Elements (row, col) and, when `second`, (row, col + 1) of the `[rows, cols]` output `out` from
/// their sums `a0` and `a1`: through the fused epilogue (`RAW` false; `ctx` as `finish` takes it)
/// or as raw f32 sums (`RAW`: `out` is a split-K slice's f32 workspace); one paired store where
/// `pairs` (cols even, so the pair is aligned).
#[inline(always)]
#[allow(clippy::type_complexity)]
unsafe fn store_pair<E: WgmmaInput, const RAW: bool>(
    out: *mut impl Copy,
    (a0, a1): (f32, f32),
    (row, col): (usize, usize),
    (second, pairs): (bool, bool),
    (operands, (rows, cols), epilogue): (
        (*const E::Elem, bool, *const E::Elem),
        (usize, usize),
        (f32, f32, u32),
    ),
) {
    let idx = row * cols + col;
    if RAW {
        let out = out.cast::<f32>();
        if second && pairs {
            store_f32x2(out.add(idx), [a0, a1]);
        } else {
            store_f32(out.add(idx), a0);
            if second {
                store_f32(out.add(idx + 1), a1);
            }
        }
        return;
    }
    let out = out.cast::<E::Elem>();
    let v0 = E::narrow(finish::<E>(a0, (row, col), operands, (rows, cols), epilogue));
    if !second {
        E::store_elem(out.add(idx), v0);
        return;
    }
    let v1 = E::narrow(finish::<E>(a1, (row, col + 1), operands, (rows, cols), epilogue));
    if pairs {
        E::store_elem_pair(out.add(idx), v0, v1);
    } else {
        E::store_elem(out.add(idx), v0);
        E::store_elem(out.add(idx + 1), v1);
    }
}

/// Write the warpgroup's piece at `origin` straight from registers, element by element inside
/// the `[m, n]` output `out` (`transposed`, a constant of the kernel: the sums are the transpose
/// of the `[n, m]` output, whose element (col, row) each is; `c` and `bias` in the output's
/// terms): through the fused epilogue (`RAW` false; `c` has the output's batch offset) or as the
/// raw f32 sums of a split-K slice (`RAW`; `E::Elem` ignored, `out` is the slice's f32
/// workspace).
#[inline(always)]
unsafe fn store_direct<E: WgmmaInput, const TILE: usize, const RAW: bool>(
    acc: &WgmmaAcc,
    out: *mut impl Copy,
    (c, bias): (*const E::Elem, *const E::Elem),
    (m, n): (usize, usize),
    origin: (usize, usize),
    (alpha, beta, activation): (f32, f32, u32),
    transposed: bool,
) {
    let has_c = !c.is_null() && beta != 0.0;
    let pairs = n % 2 == 0;
    for_each_pair::<TILE>(acc, origin, |row, col, a0, a1| {
        if row >= m || col >= n {
            return;
        }
        if transposed {
            // A pair of the sums is two elements of one output column.
            let ctx = ((c, has_c, bias), (n, m), (alpha, beta, activation));
            store_pair::<E, RAW>(out, (a0, 0.0), (col, row), (false, false), ctx);
            if col + 1 < n {
                store_pair::<E, RAW>(out, (a1, 0.0), (col + 1, row), (false, false), ctx);
            }
        } else {
            let ctx = ((c, has_c, bias), (m, n), (alpha, beta, activation));
            store_pair::<E, RAW>(out, (a0, a1), (row, col), (col + 1 < n, pairs && !RAW), ctx);
        }
    });
}

/// Write the warpgroup's piece at `origin` through shared memory: the finished elements go,
/// 64 rows × 128 bytes at a time, into the warpgroup's two `buffers` in turn (128-byte
/// swizzle: 16-byte unit u of row r at u ^ (r mod 8), so that a warp's 8 rows hit distinct
/// banks), and one thread stores each with TMA through the map at `map_out` (the part outside
/// the output is not written). A buffer is refilled once the store issued two chunks before has
/// read it, so the stores of a tile run on while the next tile's mainloop starts; `chunks` counts
/// the warpgroup's chunks so far (which buffer is next). `PLAIN`: the epilogue is `alpha·acc`
/// alone (no C, bias or activation); else `ACT` is the activation (`ACTIVATION_ANY`: the
/// launch's), `HAS_C` whether `beta·C` is added.
#[inline(always)]
#[allow(clippy::type_complexity)]
unsafe fn store_staged<
    E: WgmmaInput,
    const TILE: usize,
    const PLAIN: bool,
    const HAS_C: bool,
    const ACT: u32,
>(
    acc: &WgmmaAcc,
    ((c, bias), (m, n), origin, (alpha, beta, activation), (map_out, batch, buffers, wg)): (
        (*const E::Elem, *const E::Elem),
        (usize, usize),
        (usize, usize),
        (f32, f32, u32),
        (*const u8, usize, (u32, u32, u32), u32),
    ),
    chunks: &mut usize,
) {
    let tw = thread_x() % 128;
    let (warp, g, q) = (tw / 32, tw % 32 / 4, tw % 4);
    let size = core::mem::size_of::<E::Elem>();
    // 8-column blocks per chunk (8 of 16-bit, 4 of f32); per `m64` product and in all.
    let per_chunk = WGMMA_ROW_BYTES / (8 * size);
    let (blocks, total) = column_blocks(TILE);
    let act = if ACT == ACTIVATION_ANY { activation } else { ACT };
    // Dimensions below 2^31 (the host's condition for TMA): 32-bit bounds checks.
    let (m32, n32) = (m as u32, n as u32);
    let first = *chunks;
    // This thread's first column; N is a multiple of 4 (TMA rows are 16-byte multiples) and the
    // column even, so a pair never straddles the last column.
    let col0 = origin.1 + 2 * q;
    // The bias. 16-bit: the warpgroup copies the tile's columns to its shared `buffers.2` (a word,
    // two columns, a thread; the first chunk's barrier orders the copy before the reads, and the
    // last chunk's the reads before the next tile's copy), and each pair is one shared load at
    // a constant offset: from global memory, its address arithmetic and latency doubled the
    // epilogue's instructions and put +0.05 ms on a bf16 linear (16384, 768, 3072) of 0.16 ms.
    // f32 (TF32 and 3xTF32 kernels; twice the room): a chunk's pairs (`per_chunk` ≤ 8 blocks)
    // from global memory, all loaded before its barrier.
    let biased = !PLAIN && !bias.is_null();
    let shared_bias = biased && size == 2;
    if shared_bias && 2 * tw < tile(TILE).1 {
        let col = origin.1 + 2 * tw;
        let word = if (col as u32) < n32 { load_nc_u32(bias.add(col).cast()) } else { 0 };
        store_shared_u32(buffers.2 + 4 * tw as u32, word);
    }
    let mut bias_pairs = [[0.0f32; 2]; 8];
    unroll!(j in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
                  16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31] => {
        if j < total {
            let (mh, i) = (j / blocks, j % blocks);
            let buf = if (first + j / per_chunk) % 2 == 0 { buffers.0 } else { buffers.1 };
            if j % per_chunk == 0 {
                if biased && !shared_bias {
                    unroll!(jj in [0, 1, 2, 3, 4, 5, 6, 7] => {
                        if jj < per_chunk {
                            let col = col0 + 8 * ((j + jj) % blocks);
                            bias_pairs[jj] = if (col as u32) < n32 { E::load_pair(bias.add(col)) } else { [0.0; 2] };
                        }
                    });
                }
                // The store issued two chunks ago (from this buffer) has read it.
                if tw == 0 {
                    bulk_wait_read::<1>();
                }
                named_barrier::<128>(1 + wg);
            }
            let b = if shared_bias {
                E::load_shared_pair(buffers.2 + (4 * q + 16 * i) as u32)
            } else {
                bias_pairs[j % per_chunk]
            };
            unroll!(h in [0, 1] => {
                let r = warp * 16 + g + 8 * h;
                let (a0, a1) = (acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
                let (mut v0, mut v1) = if PLAIN {
                    (alpha * a0, alpha * a1)
                } else {
                    // alpha·acc + bias in one FMA each (no C: adding its zero would cost an
                    // addition, since x + 0.0 is not x at -0.0).
                    (fma(alpha, a0, b[0]), fma(alpha, a1, b[1]))
                };
                if !PLAIN {
                    let (row, col) = (origin.0 + 64 * mh + r, col0 + 8 * i);
                    if HAS_C && (row as u32) < m32 && (col as u32) < n32 {
                        let c = E::load_pair(c.add(row * n + col));
                        (v0, v1) = (fma(beta, c[0], v0), fma(beta, c[1], v1));
                    }
                    if size == 2 && act == ACTIVATION_GELU {
                        // 16-bit outputs: the one-op GELU.
                        (v0, v1) = (gelu_tanh_approx(v0), gelu_tanh_approx(v1));
                    } else {
                        (v0, v1) = (activate(v0, act), activate(v1, act));
                    }
                }
                let byte = (i % per_chunk) * 8 * size + 2 * q * size;
                let addr = buf + (r * WGMMA_ROW_BYTES + ((byte / 16) ^ g) * 16 + byte % 16) as u32;
                E::store_shared_pair(addr, v0, v1);
            });
            if j % per_chunk == per_chunk - 1 {
                fence_proxy_async_shared();
                named_barrier::<128>(1 + wg);
                if tw == 0 {
                    let at = ((origin.1 + 8 * (i + 1 - per_chunk)) as i32, (origin.0 + 64 * mh) as i32, batch as i32);
                    tma_store_3d(map_out, buf, at);
                    bulk_commit();
                }
            }
        }
    });
    *chunks += total / per_chunk;
}

macro_rules! wgmma_kernels {
    ($($name:ident: $e:ty, $elem:ty, $ta:literal, $tb:literal, $tile:literal, $split:literal, $swapped:literal, $out_t:literal, $sk:literal;)*) => {$(
        /// Hopper GEMM; `maps` holds A's, B's and the output's tensor maps (3xTF32: then A's and
        /// B's low parts', K-major with the boxes of A's and B's), the other arguments
        /// are the mma.sync kernels' (no A/B pointers or strides: the maps carry them);
        /// `batched_a`/`batched_b` are 1 when the operand has a batch dimension; `layers` is
        /// batch × slices. Split-K: with `k_steps` below ⌈K / bk⌉ (bk = 128 bytes of k), each
        /// slice writes its raw f32 sums to `ws[z]` (`[M, N]`) instead of `out`; `ws` is null
        /// without a split. `tma_store` 1: the output goes through shared memory and the third
        /// map (no split; rows of 16-byte multiples), else straight from registers. `cluster`: 1,
        /// or 2 when launched in clusters of two (B's map then has boxes of half the tile's
        /// columns when B is K-major). `sk_units` > 0: the last `sk_units` units are a stream-K
        /// region (one layer, no split), its split tiles' first segments' sums in `ws`
        /// (`PIECE_FLOATS` floats per region tile and consumer) and counted on `sk_flags` (one
        /// zeroed u32 per region tile and consumer, left zero).
        #[no_mangle]
        pub unsafe extern "ptx-kernel" fn $name(
            _maps: TensorMaps, c: *const $elem, bias: *const $elem, out: *mut $elem,
            m: usize, n: usize, k: usize, stride_c: usize,
            alpha: f32, beta: f32, activation: u32, batched_a: u32, batched_b: u32, k_steps: usize,
            ws: *mut f32, layers: usize, tma_store: u32, cluster: u32, sk_units: u32, sk_flags: *mut u32,
        ) {
            let maps = kernel_param_address!($name, 0);
            gemm::<$e, $ta, $tb, $tile, Matrices<$split, $swapped, $out_t, $sk>>(
                maps, (c, bias, out), (m, n, k), stride_c, (alpha, beta, activation), (batched_a, batched_b),
                (k_steps, ws), (layers, tma_store != 0, cluster as usize),
                (sk_units as usize, sk_flags), Matrices,
            )
        }
    )*};
}

wgmma_kernels! {
    gemm_wgmma_f16_nn: F16, u16, false, false, 0, false, false, false, false;
    gemm_wgmma_f16_nt: F16, u16, false, true, 0, false, false, false, false;
    gemm_wgmma_f16_tn: F16, u16, true, false, 0, false, false, false, false;
    gemm_wgmma_f16_tt: F16, u16, true, true, 0, false, false, false, false;
    gemm_wgmma_bf16_nn: BF16, u16, false, false, 0, false, false, false, false;
    gemm_wgmma_bf16_nt: BF16, u16, false, true, 0, false, false, false, false;
    gemm_wgmma_bf16_tn: BF16, u16, true, false, 0, false, false, false, false;
    gemm_wgmma_bf16_tt: BF16, u16, true, true, 0, false, false, false, false;
    gemm_wgmma_f16_nn_256x128: F16, u16, false, false, 1, false, false, false, false;
    gemm_wgmma_f16_nt_256x128: F16, u16, false, true, 1, false, false, false, false;
    gemm_wgmma_f16_tn_256x128: F16, u16, true, false, 1, false, false, false, false;
    gemm_wgmma_f16_tt_256x128: F16, u16, true, true, 1, false, false, false, false;
    gemm_wgmma_bf16_nn_256x128: BF16, u16, false, false, 1, false, false, false, false;
    gemm_wgmma_bf16_nt_256x128: BF16, u16, false, true, 1, false, false, false, false;
    gemm_wgmma_bf16_tn_256x128: BF16, u16, true, false, 1, false, false, false, false;
    gemm_wgmma_bf16_tt_256x128: BF16, u16, true, true, 1, false, false, false, false;
    gemm_wgmma_f16_nn_128x192: F16, u16, false, false, 2, false, false, false, false;
    gemm_wgmma_f16_nt_128x192: F16, u16, false, true, 2, false, false, false, false;
    gemm_wgmma_f16_tn_128x192: F16, u16, true, false, 2, false, false, false, false;
    gemm_wgmma_f16_tt_128x192: F16, u16, true, true, 2, false, false, false, false;
    gemm_wgmma_bf16_nn_128x192: BF16, u16, false, false, 2, false, false, false, false;
    gemm_wgmma_bf16_nt_128x192: BF16, u16, false, true, 2, false, false, false, false;
    gemm_wgmma_bf16_tn_128x192: BF16, u16, true, false, 2, false, false, false, false;
    gemm_wgmma_bf16_tt_128x192: BF16, u16, true, true, 2, false, false, false, false;
    gemm_wgmma_f16_nn_128x320: F16, u16, false, false, 5, false, false, false, false;
    gemm_wgmma_f16_nt_128x320: F16, u16, false, true, 5, false, false, false, false;
    gemm_wgmma_f16_tn_128x320: F16, u16, true, false, 5, false, false, false, false;
    gemm_wgmma_f16_tt_128x320: F16, u16, true, true, 5, false, false, false, false;
    gemm_wgmma_bf16_nn_128x320: BF16, u16, false, false, 5, false, false, false, false;
    gemm_wgmma_bf16_nt_128x320: BF16, u16, false, true, 5, false, false, false, false;
    gemm_wgmma_bf16_tn_128x320: BF16, u16, true, false, 5, false, false, false, false;
    gemm_wgmma_bf16_tt_128x320: BF16, u16, true, true, 5, false, false, false, false;
    gemm_wgmma_f16_nn_128x64: F16, u16, false, false, 3, false, false, false, false;
    gemm_wgmma_f16_nt_128x64: F16, u16, false, true, 3, false, false, false, false;
    gemm_wgmma_f16_tn_128x64: F16, u16, true, false, 3, false, false, false, false;
    gemm_wgmma_f16_tt_128x64: F16, u16, true, true, 3, false, false, false, false;
    gemm_wgmma_bf16_nn_128x64: BF16, u16, false, false, 3, false, false, false, false;
    gemm_wgmma_bf16_nt_128x64: BF16, u16, false, true, 3, false, false, false, false;
    gemm_wgmma_bf16_tn_128x64: BF16, u16, true, false, 3, false, false, false, false;
    gemm_wgmma_bf16_tt_128x64: BF16, u16, true, true, 3, false, false, false, false;
    gemm_wgmma_tf32_nt: Tf32, f32, false, true, 0, false, false, false, false;
    gemm_wgmma_tf32_nn: Tf32, f32, true, true, 2, false, true, false, false;
    gemm_wgmma_tf32_nn_128x64: Tf32, f32, true, true, 3, false, true, false, false;
    gemm_wgmma_f32x3_nt: Tf32, f32, false, true, 4, true, false, false, false;
    gemm_wgmma_f32x3_nn_128x64: Tf32, f32, true, true, 3, true, true, false, false;
    gemm_wgmma_f16_nn_swapped_128x64: F16, u16, true, true, 3, false, false, true, false;
    gemm_wgmma_bf16_nn_swapped_128x64: BF16, u16, true, true, 3, false, false, true, false;
    gemm_wgmma_f16_nn_sk: F16, u16, false, false, 0, false, false, false, true;
    gemm_wgmma_f16_nt_sk: F16, u16, false, true, 0, false, false, false, true;
    gemm_wgmma_f16_tn_sk: F16, u16, true, false, 0, false, false, false, true;
    gemm_wgmma_f16_tt_sk: F16, u16, true, true, 0, false, false, false, true;
    gemm_wgmma_bf16_nn_sk: BF16, u16, false, false, 0, false, false, false, true;
    gemm_wgmma_bf16_nt_sk: BF16, u16, false, true, 0, false, false, false, true;
    gemm_wgmma_bf16_tn_sk: BF16, u16, true, false, 0, false, false, false, true;
    gemm_wgmma_bf16_tt_sk: BF16, u16, true, true, 0, false, false, false, true;
    gemm_wgmma_f16_nn_256x128_sk: F16, u16, false, false, 1, false, false, false, true;
    gemm_wgmma_f16_nt_256x128_sk: F16, u16, false, true, 1, false, false, false, true;
    gemm_wgmma_f16_tn_256x128_sk: F16, u16, true, false, 1, false, false, false, true;
    gemm_wgmma_f16_tt_256x128_sk: F16, u16, true, true, 1, false, false, false, true;
    gemm_wgmma_bf16_nn_256x128_sk: BF16, u16, false, false, 1, false, false, false, true;
    gemm_wgmma_bf16_nt_256x128_sk: BF16, u16, false, true, 1, false, false, false, true;
    gemm_wgmma_bf16_tn_256x128_sk: BF16, u16, true, false, 1, false, false, false, true;
    gemm_wgmma_bf16_tt_256x128_sk: BF16, u16, true, true, 1, false, false, false, true;
    gemm_wgmma_f16_nn_128x192_sk: F16, u16, false, false, 2, false, false, false, true;
    gemm_wgmma_f16_nt_128x192_sk: F16, u16, false, true, 2, false, false, false, true;
    gemm_wgmma_f16_tn_128x192_sk: F16, u16, true, false, 2, false, false, false, true;
    gemm_wgmma_f16_tt_128x192_sk: F16, u16, true, true, 2, false, false, false, true;
    gemm_wgmma_bf16_nn_128x192_sk: BF16, u16, false, false, 2, false, false, false, true;
    gemm_wgmma_bf16_nt_128x192_sk: BF16, u16, false, true, 2, false, false, false, true;
    gemm_wgmma_bf16_tn_128x192_sk: BF16, u16, true, false, 2, false, false, false, true;
    gemm_wgmma_bf16_tt_128x192_sk: BF16, u16, true, true, 2, false, false, false, true;
}
