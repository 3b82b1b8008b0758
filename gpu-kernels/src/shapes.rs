//! Launch geometry that kernels and their host launchers must agree on.
//!
//! This file is compiled into the kernels and, through `#[path]`, into the host crate, so each
//! number lives in one place.

/// Threads per block of the 1-D elementwise, fill and random kernels.
pub const ELEMENTWISE_BLOCK: usize = 256;
/// 16-byte vectors each elementwise thread loads before it stores any: a block covers
/// `ELEMENTWISE_BLOCK * ELEMENTWISE_UNROLL * 4` elements per step of its grid-stride loop.
pub const ELEMENTWISE_UNROLL: usize = 4;
/// Threads per block of the whole-tensor reductions.
pub const REDUCE_ALL_BLOCK: usize = 512;
/// Threads per block of the row reductions (one warp per row when a row is short, the whole
/// block per row otherwise).
pub const REDUCE_ROWS_BLOCK: usize = 256;
/// Side of the square tile a transpose block moves through shared memory.
pub const TRANSPOSE_TILE: usize = 64;
/// Threads per transpose block; each moves `TILE² / 4 / BLOCK` 16-byte vectors in and out.
pub const TRANSPOSE_BLOCK: usize = 256;
/// Threads per block of the mini-batch gather (`layout::gather`).
pub const GATHER_BLOCK: usize = 256;
/// Shared-memory words a transpose tile takes: one padding column, so that the column-wise
/// reads stay within 2-way bank conflicts.
pub const TRANSPOSE_TILE_WORDS: usize = TRANSPOSE_TILE * (TRANSPOSE_TILE + 1);

/// Depth of one SIMT GEMM k-step (floats of A's rows / B's columns staged per tile).
pub const GEMM_BK: usize = 16;
/// Outputs per thread along M in the SIMT GEMM.
pub const GEMM_TM: usize = 8;
/// The SIMT GEMM tile shapes (rows of C, columns of C) a block computes, by kernel suffix.
pub const GEMM_TILE_WIDE: (usize, usize) = (128, 256);
pub const GEMM_TILE_LARGE: (usize, usize) = (128, 128);
pub const GEMM_TILE_MEDIUM: (usize, usize) = (128, 64);
pub const GEMM_TILE_SMALL: (usize, usize) = (64, 64);
/// The tiny SIMT GEMM (`gemm_f32_tiny_*`): its tile, k-chunk and threads (2×2 outputs each).
pub const GEMM_TILE_TINY: (usize, usize) = (16, 16);
pub const GEMM_TINY_KC: usize = 32;
pub const GEMM_TINY_THREADS: usize = 64;
/// The longest K the tiny GEMM is dispatched for (up to eight chunks of `GEMM_TINY_KC`).
pub const GEMM_TINY_MAX_K: usize = 256;

/// Outputs per thread along N in a SIMT GEMM tile `bn` wide: 8×16 register tiles in the wide
/// tile (256 threads), 8×8 in the others.
pub const fn gemm_tn(bn: usize) -> usize {
    if bn >= 256 {
        16
    } else {
        8
    }
}

/// Threads of a SIMT GEMM block with tile `(bm, bn)`: one per register tile.
pub const fn gemm_threads(tile: (usize, usize)) -> usize {
    (tile.0 / GEMM_TM) * (tile.1 / gemm_tn(tile.1))
}

/// Dynamic shared memory of a SIMT GEMM block: two stages of an A tile (BK×bm) and a B tile
/// (BK×bn), in bytes.
pub const fn gemm_shared_bytes(tile: (usize, usize)) -> usize {
    2 * GEMM_BK * (tile.0 + tile.1) * 4
}

/// Threads of a `conv2d_col2im_f32` block (one row of dx; they walk its columns).
pub const CONV_COL2IM_BLOCK: usize = 128;

/// Blocks of the medium SIMT tile an SM holds in the convolution kernels (their register
/// budget: `.maxntid` of this many blocks).
pub const CONV_MEDIUM_BLOCKS_PER_SM: usize = 3;

/// Epilogue activations of the GEMM kernels (the `activation` kernel argument).
pub const ACTIVATION_NONE: u32 = 0;
pub const ACTIVATION_RELU: u32 = 1;
pub const ACTIVATION_GELU: u32 = 2;

/// The tensor-core (mma.sync) GEMM: a 128×128 tile of C per 256-thread block, k-steps of 32,
/// three shared-memory stages of cp.async copies.
pub const MMA_TILE: (usize, usize) = (128, 128);
pub const MMA_BK: usize = 32;
pub const MMA_THREADS: usize = 256;
pub const MMA_STAGES: usize = 3;
/// Floats of one operand's tile in shared memory, padded so the fragment reads are
/// conflict-free: `[128][32 + 4]` when k is contiguous, `[32][128 + 8]` otherwise (the larger).
pub const MMA_OPERAND_FLOATS: usize = 128 * (MMA_BK + 4);
/// Dynamic shared memory of a tensor-core GEMM block, in bytes.
pub const MMA_SHARED_BYTES: usize = MMA_STAGES * 2 * MMA_OPERAND_FLOATS * 4;

/// The 16-bit (f16/bf16) tensor-core GEMM: same tile, threads and stages as the TF32 one, k-steps
/// of 32 elements; halves per operand tile `[128][32 + 8]` (the larger of that and `[32][128 + 8]`).
pub const MMA16_OPERAND_HALVES: usize = 128 * (MMA_BK + 8);
/// Dynamic shared memory of a 16-bit tensor-core GEMM block, in bytes.
pub const MMA16_SHARED_BYTES: usize = MMA_STAGES * 2 * MMA16_OPERAND_HALVES * 2;

/// Threads per block of the row kernels of `nn` (softmax, cross-entropy, layer norm): one block
/// per row.
pub const NN_ROW_BLOCK: usize = 256;
/// Rows up to `NN_ROW_BLOCK * 4 * NN_ROW_VECTORS` floats (8192) whose length is a multiple of 4
/// stay in registers between the passes of softmax; longer or unaligned rows are read twice.
pub const NN_ROW_VECTORS: usize = 8;

/// Modes of a row-kernel launch (softmax, layer norm, row reductions; see
/// `gpu-kernels/src/prelude/rows.rs`): `ROW_WHOLE` handles whole rows; a row split across
/// blocks runs `ROW_PARTIAL` (each block writes its chunk's statistic) then `ROW_APPLY` (each
/// block merges its row's statistics and writes its chunk's outputs), or, split across the
/// blocks of one cluster (at most `ROW_CLUSTER_MAX` chunks, compute capability 9.0 and later),
/// `ROW_CLUSTER` in one launch: the blocks exchange their statistics through distributed shared
/// memory, and each row is read once.
pub const ROW_WHOLE: u32 = 0;
/// See [`ROW_WHOLE`].
pub const ROW_PARTIAL: u32 = 1;
/// See [`ROW_WHOLE`].
pub const ROW_APPLY: u32 = 2;
/// See [`ROW_WHOLE`].
pub const ROW_CLUSTER: u32 = 3;
/// The most chunks (blocks) of a `ROW_CLUSTER` row: the portable cluster size.
pub const ROW_CLUSTER_MAX: usize = 8;
/// Values of a row each thread of a row team holds in registers (8 · `prelude::rows::SLOTS`).
pub const ROW_THREAD_VALUES: usize = 32;
/// The widest rows the one-launch layer-norm backward takes (`nn::layernorm`): two of a row
/// team's four chunks of 8 per lane of a warp (all four cost spills).
pub const LAYERNORM_FUSED_COLS: usize = 512;
/// Threads of a block of the one-launch layer-norm backward (a warp a row): twelve warps of ~164
/// registers fill an SM's register file, and one block per SM keeps the partial sums that its
/// last block adds up few.
pub const LAYERNORM_FUSED_BLOCK: usize = 384;

/// 16-byte vectors a lane holds in the layer-norm forward of rows a warp holds
/// (`layernorm_warp_fwd_*`): rows of up to 1024 16-bit or 512 f32 values.
pub const LAYERNORM_WARP_VECTORS: usize = 4;
/// Rows over this many values take the warp-row layer-norm forward (narrower rows share a warp in
/// the row teams' builds).
pub const LAYERNORM_WARP_MIN_COLS: usize = 128;

/// Cross-entropy (`nn::cross_entropy`): 16-byte vectors each thread loads before it uses any.
pub const CE_UNROLL: usize = 4;
/// Threads of a cross-entropy block over a (part of a) row: a power of two in this range, about
/// one unrolled step per thread.
pub const CE_BLOCK_MIN: usize = 128;
pub const CE_BLOCK_MAX: usize = 512;
/// Cross-entropy blocks an SM holds at once: its kernels are built for 64 registers a thread
/// (`.maxntid` of this many blocks of `CE_BLOCK_MAX`), and each block caches its row in this
/// share of the SM's shared memory.
pub const CE_BLOCKS_PER_SM: usize = 2;
/// Rows up to this many classes (8 per lane of a warp) run `CE_NARROW_BLOCK`-thread blocks in
/// which a team of 1 to 32 lanes holds a row in registers; wider rows run a block per row (or
/// per segment of it).
pub const CE_NARROW_COLS: usize = 256;
pub const CE_NARROW_BLOCK: usize = 256;
/// A row split across blocks (when rows are fewer than the device holds blocks) is cut into
/// segments of at least this many elements.
pub const CE_MIN_SEGMENT: usize = 16384;

/// Threads per block of the embedding kernels.
pub const EMBEDDING_BLOCK: usize = 128;
/// Keys one block of the embedding backward's bitonic sort orders in shared memory (16 KiB),
/// with `EMBEDDING_SORT_THREADS` threads. One block sorting 16384 keys took 360 µs (a single SM
/// through 105 barrier steps): many 2048-key tiles and global steps for the wider strides win.
pub const EMBEDDING_SORT_TILE: usize = 2048;
pub const EMBEDDING_SORT_THREADS: usize = 1024;
/// Sorted positions one block of the embedding backward sums (per run of equal ids): buckets of
/// more rows add one partial per tile they cross, in tile order.
pub const EMBEDDING_SUM_TILE: usize = 32;

/// Elements one block of a multi-tensor optimizer launch updates (one chunk of one tensor).
pub const OPTIMIZER_CHUNK: usize = 4096;
/// Threads per block of the optimizer kernels.
pub const OPTIMIZER_BLOCK: usize = 256;
/// u64 words per tensor in an optimizer's slot table: parameter, gradient, two state buffers, the
/// f32 master copy of a 16-bit parameter (addresses; 0 when unused) and the meta word
/// ([`optimizer_slot_meta`]).
pub const OPTIMIZER_SLOT_WORDS: usize = 6;
/// Element types of an optimizer slot's parameter and gradient (the host's `DType` order).
pub const OPTIMIZER_F32: u64 = 0;
pub const OPTIMIZER_F16: u64 = 1;
pub const OPTIMIZER_BF16: u64 = 2;
/// Longest tensor an optimizer slot can describe: the meta word keeps the length in its low 48 bits.
pub const OPTIMIZER_MAX_LEN: usize = (1 << 48) - 1;
const OPTIMIZER_DECAY_BIT: u64 = 1 << 48;
const OPTIMIZER_DTYPE_SHIFT: u32 = 56;

/// A slot's meta word: the length (at most [`OPTIMIZER_MAX_LEN`]), whether weight decay applies
/// to this tensor, and its element type (`OPTIMIZER_F32` ...).
pub const fn optimizer_slot_meta(len: usize, decay: bool, dtype: u64) -> u64 {
    len as u64 | if decay { OPTIMIZER_DECAY_BIT } else { 0 } | dtype << OPTIMIZER_DTYPE_SHIFT
}

/// The parts of [`optimizer_slot_meta`]: length, decay, element type.
pub const fn optimizer_slot_parts(meta: u64) -> (usize, bool, u64) {
    (
        (meta & OPTIMIZER_MAX_LEN as u64) as usize,
        meta & OPTIMIZER_DECAY_BIT != 0,
        meta >> OPTIMIZER_DTYPE_SHIFT,
    )
}

/// Set in a chunk-list unit ([`optimizer_chunk_range`]) whose block updates a piece of at most
/// `OPTIMIZER_BLOCK` elements, one a thread, instead of a chunk.
pub const OPTIMIZER_PIECE_FLAG: usize = 1 << 31;
/// Launches over at most this many elements in all update every tensor in pieces: a small model's
/// step is latency-bound, and a whole chunk (16 elements a thread, each with a square root and a
/// division) keeps its one SM busy longer than pieces spread over many SMs take.
pub const OPTIMIZER_PIECES_MAX_TOTAL: usize = 1 << 16;

/// The elements `start .. end` of its tensor (of `len`) that the optimizer block whose chunk-list
/// entry holds `unit` updates: `start = (unit without OPTIMIZER_PIECE_FLAG) · OPTIMIZER_BLOCK`,
/// then up to `OPTIMIZER_BLOCK` elements with the flag (a piece), else up to `OPTIMIZER_CHUNK`.
pub const fn optimizer_chunk_range(unit: usize, len: usize) -> (usize, usize) {
    let start = (unit & !OPTIMIZER_PIECE_FLAG) * OPTIMIZER_BLOCK;
    let size = if unit & OPTIMIZER_PIECE_FLAG != 0 { OPTIMIZER_BLOCK } else { OPTIMIZER_CHUNK };
    let end = if start + size < len { start + size } else { len };
    (start, end)
}

/// The chunk-list units ([`optimizer_chunk_range`]) that cover a tensor of `len` once: chunks, or
/// pieces when `pieces`; one (empty) unit for an empty tensor.
pub fn optimizer_chunk_units(len: usize, pieces: bool) -> impl Iterator<Item = usize> {
    let (size, flag) = if pieces { (OPTIMIZER_BLOCK, OPTIMIZER_PIECE_FLAG) } else { (OPTIMIZER_CHUNK, 0) };
    (0..len.div_ceil(size).max(1)).map(move |i| (i * (size / OPTIMIZER_BLOCK)) | flag)
}

/// Added to the norm before dividing (PyTorch's `clip_grad_norm_`): the factor is
/// `min(1, max_norm / (norm + GRAD_NORM_EPS))`.
pub const GRAD_NORM_EPS: f32 = 1e-6;

/// Adam's bias correction `1 − β^t` in f64 (the CUDA kernels take it rounded to f32): `β^t` by
/// binary powering (the algorithm of Rust's `powi`). The host (`Adam`) and the device (`adam_advance`, for graphs) both
/// call this one function, so a replayed step corrects exactly as an eager one does.
pub fn adam_bias_correction(beta: f32, t: u32) -> f64 {
    let (mut base, mut t, mut power) = (beta as f64, t, 1.0f64);
    while t != 0 {
        if t & 1 != 0 {
            power *= base;
        }
        t >>= 1;
        if t != 0 {
            base *= base;
        }
    }
    1.0 - power
}

/// Threads per block of the pooling kernels (one thread per output, output pair or input).
pub const POOL_BLOCK: usize = 256;

/// Threads per block of the batch-norm kernels; a block covers one slice of one channel.
pub const BATCHNORM_BLOCK: usize = 256;
/// Units (16-byte vectors, or single floats when `H·W` is not a multiple of 4) each batch-norm
/// thread loads before it uses any: a block moves `BATCHNORM_BLOCK * BATCHNORM_UNROLL` units per
/// step, and the host splits a channel into slices of at least that many.
pub const BATCHNORM_UNROLL: usize = 4;
/// Blocks of a batch-norm launch the host aims for (channels × slices), per SM.
pub const BATCHNORM_BLOCKS_PER_SM: usize = 4;

/// Threads per block of the loss kernels (each block writes one partial sum of the loss).
pub const LOSS_BLOCK: usize = 256;

/// Threads per block of the convolution's bias gradient (one block per output channel).
pub const CONV_BIAS_BLOCK: usize = 256;
/// Splits of the weight gradient's reduction start at multiples of this (a whole number of the
/// SIMT and tensor-core k-steps).
pub const CONV_SPLIT_ALIGN: usize = 32;

/// The Hopper GEMM (`wgmma`, sm_90a module only): persistent blocks of three warpgroups (one
/// issues the TMA copies, two compute half the tile each, here 64×256), tiles of C of 128×256
/// (this one) or as in `WGMMA_TILES`, k-steps of one 128-byte swizzle row (64 16-bit or 32 f32
/// elements), `WGMMA_STAGES` shared-memory stages.
pub const WGMMA_TILE: (usize, usize) = (128, 256);
/// Every tile of the Hopper GEMM (kernel suffixes none, `_256x128`, `_128x192`, `_128x64`, the
/// 3xTF32 kernels' `_128x128`, and `_128x320`): the 128×256 above; 256×128 (each consumer
/// warpgroup computes 128×128 as two `m64n128` products); 128×192 (one `m64n192` each), for widths that 128 and 256
/// pad or that leave the last wave short; 128×64 (one `m64n64` each), for products whose large
/// tiles would leave most SMs idle (a few rows, a thin output, small squares): four times the
/// tiles, instead of split K; 128×128 (one `m64n128` each), the 3xTF32 tile (its consumers keep
/// a second set of 64 sums a thread, which the larger tiles have no registers for); 128×320 (an
/// `m64n256` and an `m64n64` each, 160 sums a thread), for products whose waves of the others end
/// part-full.
pub const WGMMA_TILES: [(usize, usize); 6] =
    [WGMMA_TILE, (256, 128), (128, 192), (128, 64), (128, 128), (128, 320)];
pub const WGMMA_ROW_BYTES: usize = 128;
pub const WGMMA_STAGES: usize = 4;
/// The GEMM's smaller tiles take more stages in the same room (the 128×64 tile eight); at most
/// this many (the `mbarrier` slots).
pub const WGMMA_MAX_STAGES: usize = 8;
pub const WGMMA_THREADS: usize = 384;
/// Rows (or columns) of one TMA box along M or N when a 16-bit operand is M/N-major: 64
/// elements, one 128-byte swizzle row.
pub const WGMMA_MN_BOX: usize = 64;
/// Bytes of one pipeline stage: A's and B's pieces of one k-step, 384 rows for 128×256 and
/// 256×128 (the 128×192 tile uses 320 of them, the 128×64 one 192).
pub const WGMMA_STAGE_BYTES: usize = (WGMMA_TILE.0 + WGMMA_TILE.1) * WGMMA_ROW_BYTES;
/// The output staging buffers of a `wgmma` GEMM block: two of 64 rows × 128 bytes (one TMA
/// store box) per consumer warpgroup.
pub const WGMMA_OUT_BYTES: usize = 2 * 2 * 64 * WGMMA_ROW_BYTES;
/// Output rows of one TMA store box (its width is one 128-byte row): the kernel's staging chunk.
pub const WGMMA_STORE_ROWS: usize = 64;
/// The consumer warpgroups of a `wgmma` GEMM block (the first of `WGMMA_THREADS`' warpgroups
/// produces).
pub const WGMMA_CONSUMERS: usize = WGMMA_THREADS / 128 - 1;
/// A stream-K piece's f32 sums per consumer warpgroup in the workspace: 128 threads × up to 128
/// accumulators.
pub const WGMMA_PIECE_FLOATS: usize = 128 * 128;
/// Each consumer warpgroup's copy of a 16-bit bias for its tile's columns (at most 256).
pub const WGMMA_BIAS_BYTES: usize = 256 * 2;
/// Dynamic shared memory of a `wgmma` GEMM block: 1 KiB to align the stages to the 128-byte
/// swizzle's 1024-byte atoms, the stages, the output buffers, a full and an empty `mbarrier`
/// per stage (up to `WGMMA_MAX_STAGES`), then the consumers' bias copies (231,552 bytes of the
/// 232,448 an H100 block may have).
pub const WGMMA_SHARED_BYTES: usize = 1024
    + WGMMA_STAGES * WGMMA_STAGE_BYTES
    + WGMMA_OUT_BYTES
    + 2 * WGMMA_MAX_STAGES * 8
    + 2 * WGMMA_BIAS_BYTES;
/// Output tiles along M that consecutive blocks walk before moving along N, so that the blocks
/// resident at once share A and B panels in L2.
pub const WGMMA_GROUP_M: usize = 8;

/// Flash attention forward on Hopper (`wgmma` + TMA, sm_90a module): blocks of three warpgroups
/// (a TMA producer, two consumers of 64 query rows each) over `ATTN_WGMMA_BLOCK_M` query rows,
/// K and V tiles of `ATTN_WGMMA_BLOCK_N` keys in `attn_wgmma_stages(D)` shared stages; every
/// tile is stored as panels of `ATTN_WGMMA_PANEL` columns (one 128-byte swizzle row).
pub const ATTN_WGMMA_THREADS: usize = 384;
pub const ATTN_WGMMA_BLOCK_M: usize = 128;
pub const ATTN_WGMMA_BLOCK_N: usize = 128;
pub const ATTN_WGMMA_PANEL: usize = 64;

/// K/V stages of the Hopper forward: 4 at D = 64, 2 at D = 128 (measured: a third stage, which
/// still fits in the 227 KiB of shared memory, made D = 128 7% slower).
pub const fn attn_wgmma_stages(d: usize) -> usize {
    if d <= 64 {
        4
    } else {
        2
    }
}

/// Dynamic shared memory of the Hopper forward: 1 KiB to align to the swizzle's 1024-byte atoms,
/// Q, the K and V stages (16-bit), then one mbarrier for Q and four per stage.
pub const fn attn_wgmma_shared_bytes(d: usize) -> usize {
    let stages = attn_wgmma_stages(d);
    1024 + (ATTN_WGMMA_BLOCK_M + 2 * stages * ATTN_WGMMA_BLOCK_N) * d * 2 + (1 + 4 * stages) * 8
}
const _: () =
    assert!(attn_wgmma_shared_bytes(128) <= 227 * 1024 && attn_wgmma_shared_bytes(64) <= 227 * 1024);

/// Flash attention (`mma.sync` path): 4 warps per block, 16 query (or key) rows each; tiles of
/// 64 query rows and 64 keys; the dK/dV kernel walks query tiles of 32. Shared tiles are
/// `[rows][D + 8]` 16-bit elements: the 16-byte pad makes the fragment reads conflict-free.
pub const ATTN_THREADS: usize = 128;
pub const ATTN_BLOCK_M: usize = 64;
pub const ATTN_BLOCK_N: usize = 64;
pub const ATTN_BWD_BLOCK_Q: usize = 32;
/// Output columns one attention block accumulates: head dims above it (256) run in
/// `D / ATTN_MAX_OUT_COLS` passes that each recompute the scores.
pub const ATTN_MAX_OUT_COLS: usize = 128;
/// Threads per block of the attention backward's row-dot and head-reduction kernels.
pub const ATTN_AUX_BLOCK: usize = 256;

/// Halves of one shared row of head dim `d`.
pub const fn attn_row(d: usize) -> usize {
    d + 8
}

/// 16-row m-tiles per warp in the forward: two (a block of 128 query rows) up to D = 64, else
/// one (with two, D = 96 and 128 spill: 76 and 140 bytes under ptxas 13).
pub const fn attn_fwd_m_tiles(d: usize) -> usize {
    if d <= 64 {
        2
    } else {
        1
    }
}

/// Query rows of a forward block.
pub const fn attn_fwd_rows(d: usize) -> usize {
    ATTN_BLOCK_M * attn_fwd_m_tiles(d)
}

/// Dynamic shared memory of the forward block: the Q tile, then two stages of K and V tiles.
pub const fn attn_fwd_shared_bytes(d: usize) -> usize {
    (attn_fwd_rows(d) + 4 * ATTN_BLOCK_N) * attn_row(d) * 2
}

/// Dynamic shared memory of the dQ block: the Q and dO tiles, then two stages of K and V.
pub const fn attn_dq_shared_bytes(d: usize) -> usize {
    (2 * ATTN_BLOCK_M + 4 * ATTN_BLOCK_N) * attn_row(d) * 2
}

/// Dynamic shared memory of the dK/dV block: the K and V tiles, two stages of Q and dO tiles,
/// then two stages of the query tile's log-sum-exp and row dots (f32).
pub const fn attn_dkdv_shared_bytes(d: usize) -> usize {
    (2 * ATTN_BLOCK_N + 4 * ATTN_BWD_BLOCK_Q) * attn_row(d) * 2 + 4 * ATTN_BWD_BLOCK_Q * 4
}

/// The Hopper attention backward (module `attention_bwd_sm90a`): blocks of one producer
/// warpgroup (TMA) and `ATTN_WG_CONSUMERS` computing warpgroups of `ATTN_WG_ROWS` rows each (keys
/// in the dK/dV kernel, queries in the dQ kernel) that stream tiles of `attn_wg_streamed_rows`
/// rows (queries, or keys) through `attn_wg_stages` shared stages. Head dims move as
/// 64-column panels of 128-byte-swizzled rows, `ATTN_WG_PANEL_BYTES` per 64 rows.
pub const ATTN_WG_ROWS: usize = 64;
pub const ATTN_WG_CONSUMERS: usize = 2;
pub const ATTN_WG_THREADS: usize = 128 * (1 + ATTN_WG_CONSUMERS);
pub const ATTN_WG_PANEL_BYTES: usize = ATTN_WG_ROWS * 128;

/// Rows of a streamed tile of the Hopper attention backward at head dim `d`: keys in the dQ
/// kernel (`keys`), queries in the dK/dV kernel. 128 (64×128 score products: half the tiles, and
/// the streamed operand's shared-memory reads amortised over twice the columns) except for the
/// dK/dV kernel at D = 128, whose dK and dV accumulators leave registers for 64.
pub const fn attn_wg_streamed_rows(d: usize, keys: bool) -> usize {
    if d <= 64 || keys {
        128
    } else {
        64
    }
}

/// Pipeline stages of the Hopper attention backward (as many as shared memory holds, up to 4).
pub const fn attn_wg_stages(d: usize, keys: bool) -> usize {
    if d <= 64 {
        4
    } else if keys {
        2
    } else {
        3
    }
}

/// Rows of the padded per-row statistics (`lse · log2 e` and Δ) of the Hopper backward: Sq
/// rounded up to whole streamed tiles of every head dim, so that each tile's slice is one
/// aligned bulk copy.
pub const fn attn_wg_padded_rows(sq: usize) -> usize {
    sq.div_ceil(2 * ATTN_WG_ROWS) * 2 * ATTN_WG_ROWS
}

/// Dynamic shared memory of a Hopper backward kernel at head dim `d` (`keys`: the dQ kernel):
/// 1 KiB to align the tiles to the swizzle's 1024-byte atoms, two held tiles per consumer, two
/// streamed tiles per stage, the stages' statistics (two f32 per streamed row), then the
/// `mbarrier`s (the held tiles' and a full and an empty one per stage).
pub const fn attn_wg_bwd_shared_bytes(d: usize, keys: bool) -> usize {
    let (panels, stages, streamed) = (d / 64, attn_wg_stages(d, keys), attn_wg_streamed_rows(d, keys));
    1024 + 2 * ATTN_WG_CONSUMERS * panels * ATTN_WG_PANEL_BYTES
        + stages * 2 * panels * (streamed / ATTN_WG_ROWS) * ATTN_WG_PANEL_BYTES
        + stages * 2 * streamed * 4
        + 8 * (1 + 2 * stages)
}

/// The few-row GEMM (`gemv_*`): 256-thread blocks (8 warps); with B `[N, K]` each warp owns
/// `GEMV_COLS_NT` columns; A has at most `GEMV_ROWS_SMALL` or `GEMV_ROWS` rows by kernel suffix.
pub const GEMV_THREADS: usize = 256;
/// `gemv_mma_*` (tensor cores): threads of a block, and the columns of N each warp owns.
pub const GEMV_MMA_THREADS: usize = 128;
pub const GEMV_MMA_COLS: usize = 64;
pub const GEMV_COLS_NT: usize = 4;
pub const GEMV_ROWS_SMALL: usize = 4;
pub const GEMV_ROWS: usize = 16;
/// `gemv_tma_f32_*` (f32 few rows fed by TMA, sm_90a): threads of a block (eight consumer warps
/// and the producer's), the output columns a block owns, pieces of 64 k in flight (a stage is
/// one or two), and the dynamic shared memory (the pieces of 20 KB, their `mbarrier`s, the warps'
/// sums of the 16 × 64 outputs (at most 4 partials each) and the block's, 1 KB for the alignment).
pub const GEMV_TMA_THREADS: usize = 288;
pub const GEMV_TMA_COLS: usize = 64;
pub const GEMV_TMA_PIECES: usize = 8;
pub const GEMV_TMA_SHARED_BYTES: usize =
    GEMV_TMA_PIECES * (20 * 1024 + 16) + 5 * 16 * GEMV_TMA_COLS * 4 + 1024;
/// The k of `gemv_tma_f32_*`'s longest stage (`_nt`'s two pieces): its slices of K are multiples.
pub const GEMV_TMA_STAGE_K: usize = 128;
/// The most slices of K `gemv_tma_f32_*` adds in one cluster (the portable cluster size).
pub const GEMV_TMA_CLUSTER_MAX: usize = 8;
/// Blocks of `gemv_f32_nn_r16` resident per SM: its register budget (build.rs).
pub const GEMV_F32_NN_R16_BLOCKS_PER_SM: usize = 2;
/// Threads of a `gemm_reduce_*` block.
pub const GEMM_REDUCE_THREADS: usize = 256;
/// Outputs from which `gemm_reduce_*` takes four a thread: below, a quarter of the blocks would
/// leave most SMs idle (a (73, 384) weight gradient over 16 slices ran 3-8% slower with quads;
/// (128, 8192) over 4 slices 3-5% faster, H100).
pub const GEMM_REDUCE_QUADS_MIN: usize = 1 << 19;

/// Outputs per `gemm_reduce_*` thread: 4 (one 16-byte load per slice, one vector store) when
/// each batch's `m·n` outputs and the output's address `out_addr` (elements of `elem_bytes`)
/// allow whole aligned quads and there are enough of them (`GEMM_REDUCE_QUADS_MIN`), else 1.
pub const fn gemm_reduce_per_thread(mn: usize, out_addr: u64, elem_bytes: usize) -> usize {
    if mn >= GEMM_REDUCE_QUADS_MIN && mn % 4 == 0 && out_addr % (4 * elem_bytes as u64) == 0 {
        4
    } else {
        1
    }
}
/// f32 elements of A one few-row block stages in shared memory at a time (64 KiB).
pub const GEMV_A_FLOATS: usize = 16384;

/// The piece of its k-slice (of `k_chunk` elements) a few-row block stages at a time for `m`
/// rows of A with `vec`-element vectors, and the row stride of that piece in shared memory:
/// `(piece, stride)`. A piece shorter than the slice is a whole number of warp-wide vectors.
pub const fn gemv_piece(m: usize, k_chunk: usize, vec: usize) -> (usize, usize) {
    let rows = if m == 0 { 1 } else { m };
    let cap = GEMV_A_FLOATS / rows / (32 * vec) * (32 * vec);
    let piece = if k_chunk < cap { k_chunk } else { cap };
    (piece, piece.div_ceil(8) * 8)
}

/// Words a `fill_words` launch carries in its parameters: 4000 bytes, which with its other two
/// parameters stays within the 4 KB every CUDA device takes.
pub const FILL_WORDS_MAX: usize = 500;

/// Up to [`FILL_WORDS_MAX`] words passed by value as one kernel parameter (`fill_words`): a
/// captured graph keeps them in its kernel node, so a replay needs no host memory.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
pub struct ParamWords(pub [u64; FILL_WORDS_MAX]);

/// Tensor maps (`CUtensorMap`, 128 bytes each) a Hopper kernel takes by value, the most any of
/// them takes: A's, B's, the output's and two low parts' (3xTF32).
pub const TENSOR_MAPS_MAX: usize = 5;
/// Bytes of a [`TensorMaps`] parameter.
pub const TENSOR_MAPS_BYTES: usize = 128 * TENSOR_MAPS_MAX;

/// A kernel's tensor maps in order, passed by value as one kernel parameter, which TMA reads in
/// place (a `__grid_constant__` parameter): no upload before the launch, and a captured graph
/// keeps them in its kernel node. The kernel crate never reads it as a value; build.rs raises
/// its PTX alignment to the 64 bytes TMA needs (rustc's kernel ABI stops at 16).
#[repr(C, align(16))]
#[derive(Clone, Copy)]
pub struct TensorMaps(pub [u64; TENSOR_MAPS_BYTES / 8]);

/// Division by a divisor fixed for a whole kernel, of dividends below 2^31 (every index the
/// convolution kernels form): a widening multiply and a shift instead of the ~20 instructions
/// of a division by a run-time value. `q = ⌊n · mul / 2^shift⌋` with `shift = 31 + ⌈log2 d⌉`
/// and `mul = ⌈2^shift / d⌉`: `mul · d − 2^shift < d ≤ 2^⌈log2 d⌉`, so the error term
/// `n · (mul · d − 2^shift) / (d · 2^shift)` stays below `1/d` for `n < 2^31` and the floor is
/// exact. `mul` fits 32 bits (it is below 2^32 whenever d > 1, and 2^31 for d = 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FastDiv {
    pub divisor: u32,
    mul: u32,
    shift: u32,
}

impl FastDiv {
    /// The division by `d` (taken as 1 when 0, which no caller passes).
    pub const fn new(d: u32) -> FastDiv {
        let d = if d == 0 { 1 } else { d };
        let shift = 31 + (32 - (d - 1).leading_zeros());
        let mul = ((1u64 << shift).div_ceil(d as u64)) as u32;
        FastDiv { divisor: d, mul, shift }
    }

    /// `⌊n / d⌋`, for `n < 2^31`.
    #[inline(always)]
    pub fn div(self, n: u32) -> u32 {
        ((n as u64 * self.mul as u64) >> self.shift) as u32
    }

    /// `(⌊n / d⌋, n mod d)`, for `n < 2^31`.
    #[inline(always)]
    pub fn divmod(self, n: u32) -> (u32, u32) {
        let q = self.div(n);
        (q, n - q * self.divisor)
    }
}
