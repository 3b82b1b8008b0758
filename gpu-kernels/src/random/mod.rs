//! Counter-based random numbers: `rand_f32` (uniform in [0, 1)) and `randn_f32` (standard normal).
//!
//! Element `i` depends only on `(seed, i)`: Philox4x32-10 of counter `i / 4` under key `seed`
//! gives the four numbers of group `i / 4`. The arithmetic is in [`philox`], which the host's CPU
//! backend compiles too, so both backends produce the same bits.
//! Floor: 4 B written per element; the 10 Philox rounds are ~40 integer multiplies per 4 outputs.
#[cfg(feature = "random")]
pub mod generate;
pub mod philox;
