//! The edges of a captured graph: each op queued during a capture follows only the earlier ops
//! whose memory it touches (a read follows the last write of the allocation it reads; a write
//! follows the last write and every read since), so a replay runs independent ops side by side
//! (an MLP step's weight, bias and input gradients of one layer, the loss sum beside the
//! backward pass) instead of one after another as they were queued.
//!
//! The unit of memory is a whole device allocation (a pool block, whatever view of it an op
//! takes): two views of one block are never reordered, even where they do not overlap. A kernel
//! that reads addresses from device memory names them too where its launcher knows them (the
//! optimizers' slot tables, `Kernel::launch_reaching`). An op whose memory is not all named (the
//! tensor-map kernels: wgmma GEMMs and attention; an argument outside every allocation) is a
//! barrier: it follows every op before it and every op after it follows it.
//!
//! `FERROCUDA_GRAPH_STREAM_ORDER=1` keeps the stream's order instead (every op follows the one
//! queued before it), for comparisons.
use std::collections::{BTreeMap, BTreeSet};

/// One device address an op reads or writes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    pub(crate) addr: u64,
    pub(crate) write: bool,
}

impl Access {
    pub(crate) fn read(addr: u64) -> Self {
        Access { addr, write: false }
    }
    pub(crate) fn written(addr: u64) -> Self {
        Access { addr, write: true }
    }
}

/// What an op queued on a stream touches in device memory.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Footprint<'a> {
    /// Memory reached only through these addresses (null ones ignored).
    Direct(&'a [Access]),
    /// Memory the op's arguments do not name: ordered against everything.
    Opaque,
}

/// The kind of graph node an op becomes, for the type of its incoming edges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NodeKind {
    Copy,
    /// A kernel; `programmatic` where it is launched as a programmatic dependent (it waits for
    /// its predecessors with `griddepcontrol.wait`, so it may start while they finish).
    Kernel {
        programmatic: bool,
    },
}

/// Whether a capture keeps the stream's order (`FERROCUDA_GRAPH_STREAM_ORDER=1`).
pub(crate) fn stream_order_forced() -> bool {
    static FORCED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FORCED.get_or_init(|| std::env::var("FERROCUDA_GRAPH_STREAM_ORDER").is_ok_and(|v| v == "1"))
}

/// The ops of one allocation since its last write.
#[derive(Default)]
struct BlockUse {
    writer: Option<usize>,
    readers: Vec<usize>,
}

/// The ops of one capture (numbered in queue order, each with its `N`: its graph nodes) and
/// what each must follow.
pub(crate) struct CaptureOrder<N> {
    /// Per allocation start: the ops since the last barrier that touched it.
    blocks: BTreeMap<u64, BlockUse>,
    /// The last barrier op: every later op follows it.
    barrier: Option<usize>,
    /// Ops nothing follows yet.
    leaves: BTreeSet<usize>,
    ops: Vec<N>,
    /// Per op, the ops it follows through its edges (a bit set by op number), for the first
    /// `ANCESTRY_OPS` ops.
    ancestors: Vec<Vec<u64>>,
}

/// Ops whose ancestry is kept (2 MB of bits at most): a later op keeps edges that others imply.
const ANCESTRY_OPS: usize = 4096;

impl<N> Default for CaptureOrder<N> {
    fn default() -> Self {
        Self {
            blocks: BTreeMap::new(),
            barrier: None,
            leaves: BTreeSet::new(),
            ops: Vec::new(),
            ancestors: Vec::new(),
        }
    }
}

impl<N> CaptureOrder<N> {
    /// The earlier ops that an op touching `blocks` (allocation start, written) must follow;
    /// `None` for a barrier. An allocation listed twice counts as written if either says so.
    pub(crate) fn dependencies(&self, blocks: Option<&[(u64, bool)]>) -> Vec<usize> {
        let Some(blocks) = blocks else {
            return self.leaves.iter().copied().collect();
        };
        let mut deps = BTreeSet::new();
        for &(start, write) in blocks {
            let Some(used) = self.blocks.get(&start) else { continue };
            // The reads since the last write follow that write: a write after them follows them.
            if write && !used.readers.is_empty() {
                deps.extend(used.readers.iter().copied());
            } else {
                deps.extend(used.writer);
            }
        }
        // Every op since the barrier follows it: an empty set here means the barrier alone.
        if deps.is_empty() {
            deps.extend(self.barrier);
        }
        // An edge that another one implies is left out: fewer edges for the graph to wait on.
        deps.iter().copied().filter(|&d| !deps.iter().any(|&e| self.follows(e, d))).collect()
    }

    /// Whether op `later` follows op `earlier` through edges (false where not recorded).
    fn follows(&self, later: usize, earlier: usize) -> bool {
        self.ancestors
            .get(later)
            .and_then(|bits| bits.get(earlier / 64))
            .is_some_and(|w| w >> (earlier % 64) & 1 == 1)
    }

    /// Record the next op, `node`, which touches `blocks` (`None`: a barrier) and was queued
    /// after `deps` (what [`CaptureOrder::dependencies`] returned for it); its number.
    pub(crate) fn record(&mut self, blocks: Option<&[(u64, bool)]>, deps: &[usize], node: N) -> usize {
        let op = self.ops.len();
        self.ops.push(node);
        if op < ANCESTRY_OPS {
            let mut bits = vec![0u64; op.div_ceil(64)];
            for &d in deps {
                bits[d / 64] |= 1 << (d % 64);
                for (word, inherited) in bits.iter_mut().zip(&self.ancestors[d]) {
                    *word |= inherited;
                }
            }
            self.ancestors.push(bits);
        }
        for d in deps {
            self.leaves.remove(d);
        }
        self.leaves.insert(op);
        match blocks {
            None => {
                self.blocks.clear();
                self.barrier = Some(op);
            }
            Some(blocks) => {
                let written: BTreeSet<u64> = blocks.iter().filter(|b| b.1).map(|b| b.0).collect();
                for &(start, _) in blocks {
                    let used = self.blocks.entry(start).or_default();
                    if written.contains(&start) {
                        if used.writer != Some(op) {
                            *used = BlockUse { writer: Some(op), readers: Vec::new() };
                        }
                    } else if used.readers.last() != Some(&op) {
                        used.readers.push(op);
                    }
                }
            }
        }
        op
    }

    /// The ops nothing follows: what the end of the capture joins.
    pub(crate) fn leaves(&self) -> impl Iterator<Item = &N> + '_ {
        self.leaves.iter().map(|&op| &self.ops[op])
    }

    /// Op `op`'s node.
    pub(crate) fn node(&self, op: usize) -> &N {
        &self.ops[op]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(order: &mut CaptureOrder<usize>, blocks: Option<&[(u64, bool)]>) -> (usize, Vec<usize>) {
        let deps = order.dependencies(blocks);
        let next = order.ops.len();
        (order.record(blocks, &deps, next), deps)
    }

    fn leaves(order: &CaptureOrder<usize>) -> Vec<usize> {
        order.leaves().copied().collect()
    }

    #[test]
    fn reads_of_one_write_run_side_by_side() {
        let mut o = CaptureOrder::default();
        let (w, d) = op(&mut o, Some(&[(0x100, true)]));
        assert!(d.is_empty());
        let (r1, d1) = op(&mut o, Some(&[(0x100, false), (0x200, true)]));
        let (r2, d2) = op(&mut o, Some(&[(0x100, false), (0x300, true)]));
        assert_eq!((d1, d2), (vec![w], vec![w]));
        // A write after two reads follows both (and not the write they read).
        let (w2, d) = op(&mut o, Some(&[(0x100, true)]));
        assert_eq!(d, vec![r1, r2]);
        // A read of both outputs follows both of their writers.
        let (_, d) = op(&mut o, Some(&[(0x200, false), (0x300, false)]));
        assert_eq!(d, vec![r1, r2]);
        assert_eq!(leaves(&o), vec![w2, 4]);
    }

    #[test]
    fn a_write_follows_the_last_write() {
        let mut o = CaptureOrder::default();
        let (w1, _) = op(&mut o, Some(&[(0x100, true)]));
        let (_, d) = op(&mut o, Some(&[(0x100, true)]));
        assert_eq!(d, vec![w1]);
        // Read and written by one op: a write (a later read follows it).
        let (rw, _) = op(&mut o, Some(&[(0x100, false), (0x100, true), (0x100, false)]));
        let (_, d) = op(&mut o, Some(&[(0x100, false)]));
        assert_eq!(d, vec![rw]);
    }

    #[test]
    fn edges_that_others_imply_are_left_out() {
        let mut o = CaptureOrder::default();
        let (a, _) = op(&mut o, Some(&[(0x100, true)]));
        let (b, d) = op(&mut o, Some(&[(0x100, false), (0x200, true)]));
        assert_eq!(d, vec![a]);
        // Reads what a and b wrote: b follows a, so the edge from a is implied.
        let (_, d) = op(&mut o, Some(&[(0x100, false), (0x200, false)]));
        assert_eq!(d, vec![b]);
        // A barrier after two leaves follows only those.
        let (c, _) = op(&mut o, Some(&[(0x300, true)]));
        let (_, d) = op(&mut o, None);
        assert_eq!(d, vec![2, c]);
    }

    #[test]
    fn a_barrier_orders_everything() {
        let mut o = CaptureOrder::default();
        let (a, _) = op(&mut o, Some(&[(0x100, true)]));
        let (b, _) = op(&mut o, Some(&[(0x200, true)]));
        let (barrier, d) = op(&mut o, None);
        assert_eq!(d, vec![a, b]);
        assert_eq!(leaves(&o), vec![barrier]);
        // Untouched memory, or memory touched before the barrier: after the barrier.
        let (c, d) = op(&mut o, Some(&[(0x100, false)]));
        assert_eq!(d, vec![barrier]);
        let (_, d) = op(&mut o, Some(&[(0x100, true)]));
        assert_eq!(d, vec![c]);
        let (_, d) = op(&mut o, Some(&[]));
        assert_eq!(d, vec![barrier]);
    }
}
