//! Philox4x32-10 and the float transforms on top of it, in portable Rust.
//!
//! This file has no GPU code and no `std`: the kernels and the host's CPU backend both compile it,
//! and since it uses only IEEE-exact operations (`+ - * /`, integer and bit operations; no fused
//! multiply-add, no library `ln`/`sin`), the two backends produce bit-identical numbers.

const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

#[inline(always)]
fn mul_hi_lo(a: u32, b: u32) -> (u32, u32) {
    let p = a as u64 * b as u64;
    ((p >> 32) as u32, p as u32)
}

/// Philox4x32 with 10 rounds (Salmon et al., SC'11).
#[inline(always)]
pub fn philox4x32_10(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let [mut c0, mut c1, mut c2, mut c3] = counter;
    let [mut k0, mut k1] = key;
    let mut round = 0;
    while round < 10 {
        let (hi0, lo0) = mul_hi_lo(M0, c0);
        let (hi1, lo1) = mul_hi_lo(M1, c2);
        (c0, c1, c2, c3) = (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0);
        k0 = k0.wrapping_add(W0);
        k1 = k1.wrapping_add(W1);
        round += 1;
    }
    [c0, c1, c2, c3]
}

#[inline(always)]
fn bits(seed: u64, group: u64) -> [u32; 4] {
    philox4x32_10([group as u32, (group >> 32) as u32, 0, 0], [seed as u32, (seed >> 32) as u32])
}

const TWO_POW_M24: f32 = 1.0 / 16_777_216.0;

/// The four uniform floats in [0, 1) of group `group` (elements `4·group .. 4·group+4`).
#[inline(always)]
pub fn uniform4(seed: u64, group: u64) -> [f32; 4] {
    bits(seed, group).map(|x| (x >> 8) as f32 * TWO_POW_M24)
}

const TWO_POW_M16: f32 = 1.0 / 65_536.0;

/// Eight uniform floats in [0, 1) of 16 bits each, from the halves of group `group`'s four words
/// (value `e` from word `e / 2`, low half first): half the Philox rounds a value of
/// [`uniform4`], for draws whose 2^-16 resolution is enough (dropout's masks: keeping
/// probability off by < 2^-16).
#[inline(always)]
pub fn uniform8_16(seed: u64, group: u64) -> [f32; 8] {
    let w = bits(seed, group);
    let mut u = [0.0; 8];
    let mut e = 0;
    while e < 8 {
        u[e] = ((w[e / 2] >> (16 * (e % 2))) & 0xffff) as f32 * TWO_POW_M16;
        e += 1;
    }
    u
}

/// The four standard-normal floats of group `group`: Box–Muller on words (0, 1) and (2, 3).
#[inline(always)]
pub fn normal4(seed: u64, group: u64) -> [f32; 4] {
    let [a, b, c, d] = bits(seed, group);
    let (z0, z1) = box_muller(a, b);
    let (z2, z3) = box_muller(c, d);
    [z0, z1, z2, z3]
}

/// `√(-2 ln u) · (cos 2πv, sin 2πv)` with `u` in (0, 1] and `v` in [0, 1) from 24 bits each.
#[inline(always)]
fn box_muller(word_u: u32, word_v: u32) -> (f32, f32) {
    let u = ((word_u >> 8) + 1) as f32 * TWO_POW_M24;
    let radius = sqrt(-2.0 * ln(u));
    let (sin, cos) = sin_cos_turns(word_v >> 8);
    (radius * cos, radius * sin)
}

/// Natural log of a positive normal float: `e·ln 2 + 2·atanh((m-1)/(m+1))`, `m` in [√½, √2).
#[inline(always)]
fn ln(x: f32) -> f32 {
    const LN_2: f32 = core::f32::consts::LN_2;
    const SQRT_2: f32 = core::f32::consts::SQRT_2;
    let b = x.to_bits();
    let mut e = ((b >> 23) & 0xff) as i32 - 127;
    let mut m = f32::from_bits((b & 0x007f_ffff) | 0x3f80_0000);
    if m > SQRT_2 {
        m *= 0.5;
        e += 1;
    }
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    let p = s2 * (1.0 / 11.0) + 1.0 / 9.0;
    let p = p * s2 + 1.0 / 7.0;
    let p = p * s2 + 1.0 / 5.0;
    let p = p * s2 + 1.0 / 3.0;
    let p = p * s2 + 1.0;
    e as f32 * LN_2 + 2.0 * s * p
}

/// Square root by Newton's method from the exponent-halving guess (4 steps reach f32 precision).
#[inline(always)]
fn sqrt(x: f32) -> f32 {
    if x <= 0.0 {
        return 0.0;
    }
    let mut y = f32::from_bits((x.to_bits() >> 1) + 0x1fbd_1df5);
    let mut step = 0;
    while step < 4 {
        y = 0.5 * (y + x / y);
        step += 1;
    }
    y
}

/// `(sin, cos)` of `2π · k / 2^24` for a 24-bit `k`: the quadrant from the top two bits, Taylor
/// series on the rest (an angle in [0, π/2)).
#[inline(always)]
fn sin_cos_turns(k: u32) -> (f32, f32) {
    const TAU: f32 = core::f32::consts::TAU;
    let quadrant = k >> 22;
    let theta = (k & 0x003f_ffff) as f32 * TWO_POW_M24 * TAU;
    let t2 = theta * theta;
    let s = -1.0 / 39_916_800.0;
    let s = s * t2 + 1.0 / 362_880.0;
    let s = s * t2 - 1.0 / 5_040.0;
    let s = s * t2 + 1.0 / 120.0;
    let s = s * t2 - 1.0 / 6.0;
    let sin = theta * (s * t2 + 1.0);
    let c = 1.0 / 479_001_600.0;
    let c = c * t2 - 1.0 / 3_628_800.0;
    let c = c * t2 + 1.0 / 40_320.0;
    let c = c * t2 - 1.0 / 720.0;
    let c = c * t2 + 1.0 / 24.0;
    let c = c * t2 - 0.5;
    let cos = c * t2 + 1.0;
    match quadrant {
        0 => (sin, cos),
        1 => (cos, -sin),
        2 => (-sin, -cos),
        _ => (-cos, sin),
    }
}
