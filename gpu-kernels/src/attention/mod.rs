//! Flash attention on `mma.sync` tensor cores (f16/bf16 in, f32 accumulation): the forward
//! pass ([`forward`]) and the backward passes ([`backward`]), for head dims 32, 64, 96, 128 and
//! 256. Layout: q `[B, Hq, Sq, D]`, k and v `[B, Hkv, Sk, D]`, contiguous; head `h` reads kv
//! head `h / (Hq / Hkv)`. Causal masking is aligned to the bottom right: query `i` sees key `j`
//! iff `j ≤ i + Sk − Sq`.
//!
//! Shared pieces: tiles copied with `cp.async` into `[rows][D + 8]` shared arrays; per-warp
//! products of a 16-row A strip with a tile, in the `mma.m16n8k16` fragment layout (lane
//! 4g + t holds rows g and g + 8, columns 2t and 2t + 1 of each 8-column accumulator).
#[cfg(feature = "attention")]
pub mod backward;
#[cfg(feature = "attention_bwd_sm90a")]
pub mod backward_wgmma;
#[cfg(feature = "attention")]
pub mod forward;
#[cfg(feature = "attention_sm90a")]
pub mod forward_wgmma;
#[cfg(feature = "attention")]
pub mod heads;

use crate::prelude::*;
use crate::shapes::{attn_row, ATTN_THREADS as THREADS};

/// Issue this thread's copies of `rows` rows of `[.., D]` from `src` into `tile`; rows at or past
/// `valid` are zero-filled without a read.
///
/// # Safety
/// `tile` is a shared tile of `rows` rows of `attn_row(D)`; `src` is 16-byte aligned and its
/// first `min(rows, valid)` rows of `D` elements are readable.
#[inline(always)]
pub(crate) unsafe fn load_tile<const D: usize>(tile: *mut u16, src: *const u16, rows: usize, valid: usize) {
    let chunks = D / 8;
    let mut c = thread_x();
    while c < rows * chunks {
        let (r, col) = (c / chunks, c % chunks * 8);
        let ok = r < valid;
        let from = if ok { src.add(r * D + col) } else { src };
        cp_async_16(
            shared_addr(tile.add(r * attn_row(D) + col)),
            from as *const f32,
            if ok { 16 } else { 0 },
        );
        c += THREADS;
    }
}

/// `s[mt][nt] += A[r0 + 16·mt.., :] · B[8·nt.., :]ᵀ` over all D columns of two row-major tiles
/// (both contiguous along D): Q Kᵀ, dO Vᵀ, K Qᵀ, V dOᵀ. Fragments come by `ldmatrix.x4`: A's
/// 16×16 per m-tile and k-step, B's two 8-row tiles per k-step, each B fragment used by all MT
/// m-tiles.
///
/// # Safety
/// Both tiles are shared tiles of head dim D with at least `r0 + 16·MT` and `8·NT` rows (NT
/// even); every lane of the warp calls it.
#[inline(always)]
pub(crate) unsafe fn rows_by_rows<H: MmaInput, const D: usize, const MT: usize, const NT: usize>(
    a: *const u16,
    r0: usize,
    b: *const u16,
    s: &mut [[[f32; 4]; NT]; MT],
) {
    let l = lane();
    let a_lane = a.add((r0 + (l & 15)) * attn_row(D) + (l >> 4) * 8);
    let b_lane = b.add(((l & 7) + (l >> 4) * 8) * attn_row(D) + (l >> 3 & 1) * 8);
    unroll!(ks in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] => {
        if ks < D / 16 {
            let mut fa = [[0u32; 4]; MT];
            unroll!(mt in [0, 1] => {
                if mt < MT {
                    fa[mt] = ldmatrix_x4(shared_addr(a_lane.add(mt * 16 * attn_row(D) + ks * 16)));
                }
            });
            unroll!(n2 in [0, 1, 2, 3] => {
                if 2 * n2 < NT {
                    let f = ldmatrix_x4(shared_addr(b_lane.add(n2 * 16 * attn_row(D) + ks * 16)));
                    unroll!(mt in [0, 1] => {
                        if mt < MT {
                            H::mma_16x8x16(&mut s[mt][2 * n2], fa[mt], [f[0], f[1]]);
                            H::mma_16x8x16(&mut s[mt][2 * n2 + 1], fa[mt], [f[2], f[3]]);
                        }
                    });
                }
            });
        }
    });
}

/// Two f32 as a 16-bit pair, `lo` in the low half.
#[inline(always)]
fn pack<H: HalfFloat>(lo: f32, hi: f32) -> u32 {
    H::from_f32(lo) as u32 | (H::from_f32(hi) as u32) << 16
}

/// `acc[mt][n] += P[mt] · B[:, c0 + 8n..]`: P is the warp's MT strips of 16 × 8·NT held as
/// accumulators (the accumulator layout of two adjacent 8-column tiles is the A fragment of one
/// k16 step), B a shared tile whose rows are P's columns (k-major), read with `ldmatrix.trans`.
///
/// # Safety
/// `b` is a shared tile of head dim D with at least `8·NT` rows, `c0 + 8·NO ≤ D`; every lane of
/// the warp calls it.
#[inline(always)]
pub(crate) unsafe fn strip_by_tile<
    H: MmaInput,
    const D: usize,
    const MT: usize,
    const NT: usize,
    const NO: usize,
>(
    p: &[[[f32; 4]; NT]; MT],
    b: *const u16,
    c0: usize,
    acc: &mut [[[f32; 4]; NO]; MT],
) {
    let l = lane();
    let (row, col) = ((l & 7) + (l >> 3 & 1) * 8, (l >> 4) * 8);
    unroll!(kk in [0, 1, 2, 3] => {
        if 2 * kk < NT {
            let mut fa = [[0u32; 4]; MT];
            unroll!(mt in [0, 1] => {
                if mt < MT {
                    let (p0, p1) = (p[mt][2 * kk], p[mt][2 * kk + 1]);
                    fa[mt] = [pack::<H>(p0[0], p0[1]), pack::<H>(p0[2], p0[3]), pack::<H>(p1[0], p1[1]), pack::<H>(p1[2], p1[3])];
                }
            });
            unroll!(n2 in [0, 1, 2, 3, 4, 5, 6, 7] => {
                if 2 * n2 < NO {
                    let at = b.add((kk * 16 + row) * attn_row(D) + c0 + n2 * 16 + col);
                    let f = ldmatrix_x4_trans(shared_addr(at));
                    unroll!(mt in [0, 1] => {
                        if mt < MT {
                            H::mma_16x8x16(&mut acc[mt][2 * n2], fa[mt], [f[0], f[1]]);
                            H::mma_16x8x16(&mut acc[mt][2 * n2 + 1], fa[mt], [f[2], f[3]]);
                        }
                    });
                }
            });
        }
    });
}

/// Whether key `key` is hidden from query `query`: past the keys, or (causal) after the
/// diagonal `key = query + offset`, `offset = Sk − Sq`.
#[inline(always)]
pub(crate) fn masked(key: usize, query: usize, sk: usize, causal: bool, offset: isize) -> bool {
    key >= sk || (causal && key as isize > query as isize + offset)
}

/// Store a warp's 16 × 8·NO accumulator strip (scaled by `scale[row half]`) to rows `r[0]`,
/// `r[1]` (this lane's) of a row-major 16-bit output with row length `d`, from column `c0`; rows
/// at or past `rows` are skipped.
///
/// # Safety
/// `out` holds `rows` rows of `d` elements and `c0 + 8·NO ≤ d`.
#[inline(always)]
pub(crate) unsafe fn store_strip<H: HalfFloat, const NO: usize>(
    acc: &[[f32; 4]; NO],
    scale: [f32; 2],
    out: *mut u16,
    (r, rows, d, c0): ([usize; 2], usize, usize, usize),
) {
    let t = lane() % 4;
    unroll!(half in [0, 1] => {
        if r[half] < rows {
            let row = out.add(r[half] * d + c0 + 2 * t);
            unroll!(n in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] => {
                if n < NO {
                    let v = (acc[n][2 * half] * scale[half], acc[n][2 * half + 1] * scale[half]);
                    store_u16x2(row.add(n * 8), H::from_f32(v.0), H::from_f32(v.1));
                }
            });
        }
    });
}

/// Where the rows of a head start in a 16-bit tensor the Hopper kernels write or read by address:
/// element strides between consecutive rows, heads and batches. Head-major `[B, H, S, D]` has
/// `(D, S·D, H·S·D)`; token-major `[B, S, Htot, D]` (a projection's output, heads side by side
/// in a row) `(Htot·D, D, S·Htot·D)`.
#[derive(Clone, Copy)]
pub(crate) struct HeadStrides {
    pub row: usize,
    pub head: usize,
    pub batch: usize,
}

impl HeadStrides {
    /// The offset of row `r` of head `h` of batch `b`.
    #[inline(always)]
    pub fn at(self, b: usize, h: usize, r: usize) -> usize {
        b * self.batch + h * self.head + r * self.row
    }
}

/// TMA: a box of rows `row..` of head `h` of batch `b` (of `heads`), columns from `col`, into `dst`
/// counted on `bar`. `flat` maps are 3-D (D, rows, B·heads: a head-major tensor, whose heads and
/// batches collapse into one dimension), the others 4-D (D, rows, heads, batches).
///
/// # Safety
/// As [`tma_load_3d`], the map of the form `flat` says.
#[cfg(any(feature = "attention_sm90a", feature = "attention_bwd_sm90a"))]
#[inline(always)]
pub(crate) unsafe fn load_head_box(
    (dst, map, bar): (u32, *const u8, u32),
    (col, row): (usize, usize),
    (h, b, heads): (usize, usize, usize),
    flat: bool,
) {
    if flat {
        tma_load_3d(dst, map, bar, (col as i32, row as i32, (b * heads + h) as i32));
    } else {
        tma_load_4d(dst, map, bar, (col as i32, row as i32, h as i32, b as i32));
    }
}

/// Block coordinates of a per-(row tile, head, batch · pass) launch: (tile, head, batch, pass);
/// tiles run last-first, so the longest causal rows start first.
#[inline(always)]
pub(crate) fn block_coords(passes: usize) -> (usize, usize, usize, usize) {
    (grid_dim_x() - 1 - block_x(), block_y(), block_z() / passes, block_z() % passes)
}
