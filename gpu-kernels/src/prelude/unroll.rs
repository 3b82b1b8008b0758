//! Loop unrolling that does not depend on LLVM's size heuristics.

/// `unroll!(u in [0, 1, 2, 3] => { ... })` repeats the block once per listed index, with `u`
/// bound to it. Arrays indexed by `u` then stay in registers; a rolled loop over a large body
/// would index them at run time and put them in local memory.
#[macro_export]
macro_rules! unroll {
    ($u:ident in [$($k:literal),* $(,)?] => $body:block) => {
        $({
            let $u: usize = $k;
            $body
        })*
    };
}
