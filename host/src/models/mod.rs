//! Whole models built from [`layers`](crate::layers): [`Gpt`].
mod gpt;

pub use gpt::{Gpt, GptConfig, SplitMix64};
