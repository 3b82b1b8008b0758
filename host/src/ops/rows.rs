//! The dispatch of the row kernels (softmax, log-softmax, layer norm, the row reductions; their
//! kernels share `gpu-kernels/src/prelude/rows.rs`) and of the column sums (`sum_leading`, layer
//! norm's parameter gradients).
//!
//! Rows of `cols` values go to teams of threads that hold them in registers, built for 8, 16 or
//! 32 values a thread (`RowKernels`: fewer values, fewer registers, more warps an SM):
//! - `cols ≤ 256`: a team of `next_pow2(⌈cols/8⌉)` lanes (several rows per warp), one 16-byte
//!   chunk of 8 values a lane (the 8-value builds: 32 registers, full occupancy);
//! - `256 < cols ≤ 8192`: a team of `next_pow2(⌈cols/32⌉)` threads (a warp up to a block of 256),
//!   each holding the fewest chunks (2 or 4) that cover the row;
//! - longer rows, or rows too few to give every SM two blocks (chunks of at least
//!   `MIN_SPLIT_CHUNK` values): a block of `NN_ROW_BLOCK` per chunk of 8192 values, in two
//!   launches of the 32-value build over all rows: `ROW_PARTIAL` writes each chunk's statistic,
//!   `ROW_APPLY` re-reads the chunk (from L2 where the input fits there), merges its row's and
//!   writes (the reductions' second pass reads only the partials). One pair of launches over all
//!   rows beat both a pair per L2-sized row group (main's: many half-empty waves) and one
//!   pipelined launch whose blocks drew partial and apply items (the re-read missed L2 anyway,
//!   and each row group read layer norm's γ and β again): see the row-op notes.
//! - split rows of at most `ROW_CLUSTER_MAX` chunks, on compute capability 9.0 and later: one
//!   `ROW_CLUSTER` launch, a cluster of blocks per row (a block per chunk) that exchange their
//!   chunks' statistics through distributed shared memory, so each value is read once and no
//!   partials go through global memory.
use crate::runtime::device::DeviceInfo;
use crate::runtime::error::{Error, Result};
use crate::runtime::kernel::{ByDType, DevPtrMut};
use crate::runtime::launch::LaunchConfig;
use crate::runtime::pool::DeviceBuffer;
use crate::runtime::stream::{Stream, COLUMN_COUNTERS};
use crate::shapes::{
    NN_ROW_BLOCK, ROW_APPLY, ROW_CLUSTER, ROW_CLUSTER_MAX, ROW_PARTIAL, ROW_THREAD_VALUES, ROW_WHOLE,
};
use std::sync::Arc;

/// Widest row a team of at most a warp takes.
const WARP_ROW_MAX: usize = 32 * ROW_THREAD_VALUES;
/// Widest chunk a block holds.
const BLOCK_CHUNK_MAX: usize = NN_ROW_BLOCK * ROW_THREAD_VALUES;
/// Narrowest chunk a row is split into to give more SMs work.
const MIN_SPLIT_CHUNK: usize = 2048;
/// Chunks of 8 values a thread of a split row holds.
const SLOTS: usize = ROW_THREAD_VALUES / 8;

/// A row kernel's builds by the values a thread holds: 32 (four chunks of 8; also the
/// `ROW_PARTIAL` and `ROW_APPLY` launches of split rows), 16, 8.
pub(crate) type RowKernels<A, B> = [ByDType<A, B>; 3];

/// One launch of a row kernel.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RowLaunch {
    pub cfg: LaunchConfig,
    pub rows: usize,
    pub team: usize,
    pub chunk: usize,
    pub mode: u32,
    /// Chunks of 8 values a thread holds: 4, 2 or 1.
    pub slots: usize,
    /// Blocks per cluster along x (1: no clusters).
    pub cluster: u32,
}

impl RowLaunch {
    /// The index in a [`RowKernels`] of the build this launch needs.
    pub(crate) fn variant(&self) -> usize {
        match self.slots {
            1 => 2,
            2 => 1,
            _ => 0,
        }
    }

    /// A `ROW_CLUSTER` launch (a row's chunks in one cluster, the 32-value build): the launches
    /// that may take a kernel's cluster-only build (`*_cluster_*`, which runs `ROW_CLUSTER`
    /// whatever its mode argument).
    pub(crate) fn clustered(&self) -> bool {
        self.mode == ROW_CLUSTER && self.variant() == 0
    }
}

/// How rows of `cols` values run; see the module documentation.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RowPlan {
    rows: usize,
    team: usize,
    /// Values per chunk (a multiple of 8); `cols` rounded up when rows are not split.
    chunk: usize,
    /// Chunks per row.
    pub chunks: usize,
    /// Chunks of 8 values a thread holds (1, 2 or 4).
    slots: usize,
    /// A split row's chunks run as one cluster (`ROW_CLUSTER`).
    clustered: bool,
}

impl RowPlan {
    pub(crate) fn new(
        op: &'static str,
        shape: &[usize],
        (rows, cols): (usize, usize),
        info: &DeviceInfo,
    ) -> Result<Self> {
        let too_big =
            |reason: &str| Error::InvalidArgument { op, shape: shape.to_vec(), reason: reason.into() };
        if rows > i32::MAX as usize {
            return Err(too_big("more than 2^31-1 rows"));
        }
        if cols <= WARP_ROW_MAX {
            return Ok(Self::whole_rows(rows, cols));
        }
        let mut chunks = cols.div_ceil(BLOCK_CHUNK_MAX);
        let wanted = 2 * info.sm_count as usize;
        if rows < wanted {
            chunks = chunks.max(wanted.div_ceil(rows).min(cols / MIN_SPLIT_CHUNK));
        }
        if chunks == 1 {
            return Ok(Self::whole_rows(rows, cols));
        }
        let chunk = cols.div_ceil(chunks).next_multiple_of(8);
        let chunks = cols.div_ceil(chunk);
        if chunks > BLOCK_CHUNK_MAX {
            // The partials of a row must fit one block's registers for the reductions' last pass.
            return Err(too_big("rows longer than 2^26 values"));
        }
        // Clustered rows go on gridDim.y (at most 65535).
        let clustered =
            chunks <= ROW_CLUSTER_MAX && info.compute_capability.0 >= 9 && rows <= u16::MAX as usize;
        Ok(Self { rows, team: NN_ROW_BLOCK, chunk, chunks, slots: SLOTS, clustered })
    }

    /// Rows of at most `BLOCK_CHUNK_MAX` values, never split: a team per row. Rows of up to 8
    /// values a lane of a warp take teams of `next_pow2(⌈cols/8⌉)` lanes holding one chunk each;
    /// wider rows a team of about `cols / ROW_THREAD_VALUES` threads (a warp to a block), each holding
    /// the fewest chunks (1, 2, 4) that cover the row. Fewer values a thread is fewer registers,
    /// so more warps an SM to wait for memory.
    pub(crate) fn whole_rows(rows: usize, cols: usize) -> Self {
        let team = if cols <= 8 * 32 {
            cols.div_ceil(8).next_power_of_two()
        } else {
            cols.div_ceil(ROW_THREAD_VALUES).next_power_of_two().clamp(32, NN_ROW_BLOCK)
        };
        let slots = cols.div_ceil(8 * team).next_power_of_two();
        let chunk = cols.next_multiple_of(8);
        Self { rows, team, chunk, chunks: 1, slots, clustered: false }
    }

    /// The plan of a reduction: rows a block takes spread over twice the threads, 16 values each
    /// (reads only: more loads in flight an SM beat fewer registers; main's layout, 81% of copy
    /// at 4096×4096 against 76% with 32 values a thread).
    pub(crate) fn for_reduction(self) -> Self {
        if self.split() {
            // Two launches read each value once too (the second reads only the partials), and
            // are not held back by clusters waiting for a whole set of free blocks on one GPC:
            // sum_rows (4096, 50257) 0.287 ms in two launches, 0.365 ms in clusters.
            return Self { clustered: false, ..self };
        }
        if self.team < 32 || self.slots < 4 {
            return self;
        }
        let team = (2 * self.team).min(NN_ROW_BLOCK);
        Self { team, slots: self.chunk.div_ceil(8 * team).next_power_of_two(), ..self }
    }

    /// Rows run split (two launches).
    pub(crate) fn split(&self) -> bool {
        self.chunks > 1
    }

    /// Floats of partial statistics (of `width` floats each) the launches need.
    pub(crate) fn partials_len(&self, width: usize) -> usize {
        if self.split() && !self.clustered {
            self.rows * self.chunks * width
        } else {
            0
        }
    }

    /// The plan's `ROW_CLUSTER` launch, if its rows run in clusters (then it is the only one).
    pub(crate) fn cluster_launch(&self) -> Option<RowLaunch> {
        self.launches().into_iter().find(RowLaunch::clustered)
    }

    /// The launches, in order.
    pub(crate) fn launches(&self) -> Vec<RowLaunch> {
        // Teams of up to a warp share blocks of NN_ROW_BLOCK threads; larger teams are the block.
        let block = if self.team <= 32 { NN_ROW_BLOCK } else { self.team };
        let per_block = block / self.team;
        let launch = |mode: u32| RowLaunch {
            cfg: LaunchConfig {
                grid: (self.rows.div_ceil(per_block) as u32, self.chunks as u32, 1),
                block: (block as u32, 1, 1),
                shared_bytes: 0,
            },
            rows: self.rows,
            team: self.team,
            chunk: self.chunk,
            mode,
            slots: self.slots,
            cluster: 1,
        };
        if !self.split() {
            return vec![launch(ROW_WHOLE)];
        }
        if self.clustered {
            let l = launch(ROW_CLUSTER);
            let cfg = LaunchConfig { grid: (self.chunks as u32, self.rows as u32, 1), ..l.cfg };
            return vec![RowLaunch { cfg, cluster: self.chunks as u32, ..l }];
        }
        // Blocks run x fastest: a chunk's blocks of every row one after another (layer norm's γ
        // and β chunk from DRAM once); the apply launch takes the chunks last to first, starting
        // where the partial launch left L2.
        vec![launch(ROW_PARTIAL), launch(ROW_APPLY)]
    }
}

/// How a column sum over `rows` rows of `cols` values runs: `c_lanes` column lanes per block
/// (8 columns each), row groups of `rows_per_group` rows (`groups` of them; more than one needs
/// the final pass over the partial sums).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ColumnPlan {
    cols: usize,
    pub c_lanes: usize,
    pub rows_per_group: usize,
    pub groups: usize,
    pub cfg: LaunchConfig,
}

/// Column lanes of a first-pass block at most (8 columns each, 128 columns a block): at a GPT's
/// widths a block of 256 columns left half of its second block idle at 384 columns and gave 2-3
/// blocks across, and 16 lanes (16 rows at once a block) measured faster at every GPT width.
/// Thirty-sixth session, H200, bf16 bias-gradient sums over 16384 rows, ms, (384, 1152, 1536)
/// columns, with the two constants below: 32 lanes, 64 rows, 4 final lanes (before) 0.0158,
/// 0.0203, 0.0218; 16, 64, 4: 0.0140, 0.0177, 0.0218; 16, 128, 8 (these) 0.0114, 0.0164,
/// 0.0205; 8, 64, 4: 0.0126, 0.0180, 0.0221; GPT step 6.21 → 6.13 ms (single 300-step runs).
const COLUMN_LANES_MAX: usize = 16;
/// Rows a column team's group takes at least (below this the final pass costs more than it
/// saves): 128 rows, 8 loads a thread of a 16-lane block.
const MIN_GROUP_ROWS: usize = 128;
/// Column lanes of the final pass's blocks (64 columns a block): its few rows of partial sums
/// spread over many blocks, each thread adding a handful (a block as wide as the first pass's,
/// 256 columns, left 2 blocks at 384 columns to add 256 groups, 32 dependent loads a thread).
const FINAL_C_LANES: usize = 8;

impl ColumnPlan {
    pub(crate) fn new(
        op: &'static str,
        shape: &[usize],
        rows: usize,
        cols: usize,
        info: &DeviceInfo,
    ) -> Result<Self> {
        let c_lanes = cols.div_ceil(8).next_power_of_two().min(COLUMN_LANES_MAX);
        let col_blocks = cols.div_ceil(8 * c_lanes);
        if col_blocks > i32::MAX as usize {
            return Err(Error::InvalidArgument {
                op,
                shape: shape.to_vec(),
                reason: "too many columns".into(),
            });
        }
        let wanted = (4 * info.sm_count as usize).div_ceil(col_blocks);
        // A split grid counts its groups on one of the stream's counters per column block.
        let wanted = if col_blocks > COLUMN_COUNTERS { 1 } else { wanted };
        let groups = wanted.min(rows.div_ceil(MIN_GROUP_ROWS)).clamp(1, u16::MAX as usize);
        let rows_per_group = rows.div_ceil(groups).max(1);
        let groups = rows.div_ceil(rows_per_group).max(1);
        Ok(Self {
            cols,
            c_lanes,
            rows_per_group,
            groups,
            cfg: LaunchConfig {
                grid: (col_blocks as u32, groups as u32, 1),
                block: (NN_ROW_BLOCK as u32, 1, 1),
                shared_bytes: 0,
            },
        })
    }

    /// A buffer of `per_group` floats of partial sums per row group, when there is more than one
    /// group (its pointer, or null).
    pub(crate) fn partials(
        &self,
        op: &'static str,
        stream: &Arc<Stream>,
        per_group: usize,
    ) -> Result<(Option<DeviceBuffer>, DevPtrMut<f32>)> {
        if self.groups == 1 {
            return Ok((None, DevPtrMut::new(0)));
        }
        let buf = stream.device.pool.alloc(stream, self.groups * per_group * 4, op)?;
        let ptr = buf.dev_ptr_mut();
        Ok((Some(buf), ptr))
    }

    /// The final pass: one group of `groups` rows of partial sums, its launch shape and column
    /// lanes.
    pub(crate) fn final_pass(&self) -> (LaunchConfig, usize) {
        let c_lanes = FINAL_C_LANES.min(self.c_lanes);
        (LaunchConfig { grid: (self.cols.div_ceil(8 * c_lanes) as u32, 1, 1), ..self.cfg }, c_lanes)
    }
}

impl RowPlan {
    /// Run `launch(l, partials)` for each launch of the plan, with a buffer of partial
    /// statistics of `width` floats each (null when rows are not split).
    pub(crate) fn run(
        &self,
        op: &'static str,
        stream: &Arc<Stream>,
        width: usize,
        mut launch: impl FnMut(&RowLaunch, DevPtrMut<f32>) -> Result<()>,
    ) -> Result<()> {
        let partials = if self.partials_len(width) > 0 {
            Some(stream.device.pool.alloc(stream, self.partials_len(width) * 4, op)?)
        } else {
            None
        };
        let ptr = partials.as_ref().map_or(DevPtrMut::new(0), |p| p.dev_ptr_mut());
        for l in self.launches() {
            launch(&l, ptr)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(compute_capability: (u32, u32)) -> DeviceInfo {
        DeviceInfo {
            ordinal: 0,
            name: "test".into(),
            compute_capability,
            sm_count: 132,
            max_threads_per_sm: 2048,
            total_memory: 80 << 30,
            l2_bytes: 50 << 20,
            max_shared_per_block_optin: 227 << 10,
        }
    }

    /// (mode, grid, cluster) of each launch of the plan for `[rows, cols]`.
    fn launches(rows: usize, cols: usize, cc: (u32, u32)) -> Vec<(u32, (u32, u32, u32), u32)> {
        let plan = RowPlan::new("test", &[rows, cols], (rows, cols), &device(cc)).unwrap();
        plan.launches().iter().map(|l| (l.mode, l.cfg.grid, l.cluster)).collect()
    }

    #[test]
    fn split_rows_run_as_clusters_where_a_cluster_holds_them() {
        // Few long rows: 7 chunks of a 50257-value row, one cluster a row, no partials.
        assert_eq!(launches(64, 50257, (9, 0)), [(ROW_CLUSTER, (7, 64, 1), 7)]);
        let plan = RowPlan::new("test", &[64, 50257], (64, 50257), &device((9, 0))).unwrap();
        assert_eq!(plan.partials_len(2), 0);
        // Many rows too wide for a block: 2 chunks a row.
        assert_eq!(launches(300, 9001, (9, 0)), [(ROW_CLUSTER, (2, 300, 1), 2)]);
        // Before Hopper (no clusters), and rows of more chunks than a cluster takes: two launches.
        assert_eq!(launches(64, 50257, (8, 0)), [(ROW_PARTIAL, (64, 7, 1), 1), (ROW_APPLY, (64, 7, 1), 1)]);
        // Reductions read each value once either way: two launches, no cluster scheduling.
        let plan = RowPlan::new("test", &[64, 50257], (64, 50257), &device((9, 0))).unwrap().for_reduction();
        assert_eq!(plan.launches().iter().map(|l| l.mode).collect::<Vec<_>>(), [ROW_PARTIAL, ROW_APPLY]);
        let long = launches(16, 1 << 22, (9, 0));
        assert_eq!(long.iter().map(|l| (l.0, l.2)).collect::<Vec<_>>(), [(ROW_PARTIAL, 1), (ROW_APPLY, 1)]);
        // More rows than a grid's y holds: two launches.
        assert_eq!(launches(70_000, 9001, (9, 0)).len(), 2);
        // Rows a block holds stay whole.
        assert_eq!(launches(1000, 4096, (9, 0)), [(ROW_WHOLE, (1000, 1, 1), 1)]);
    }
}
