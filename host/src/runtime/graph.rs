//! CUDA graphs: [`Context::capture`] records the work a closure queues on the context's stream,
//! [`Graph::launch`] replays it with one driver call.
//!
//! A replay repeats the captured launches with the same arguments: the same buffers, the same
//! scalars. What changes between replays must therefore live in device memory that the graph
//! reads: inputs refreshed in place ([`Tensor::copy_from_slice`](crate::Tensor::copy_from_slice),
//! [`Labels::copy_from_slice`](crate::Labels::copy_from_slice)) and counters the kernels advance
//! themselves ([`Adam::capturable`](crate::Adam::capturable)).
//!
//! Order: a captured op follows only the earlier ops whose memory it touches (`capture.rs`), not
//! every op queued before it, so a replay runs independent ops side by side; the graph as a whole
//! still runs in its stream's order, after the work queued before it and before the work after.
//!
//! Memory: every pool block handed out during the capture, and every block freed on the stream
//! during it, belongs to the graph until the graph is dropped (a tensor made in the capture may be
//! dropped at any time; its block stays reserved for the replays). Buffers made before the capture
//! and read or written by it (parameters, static inputs) stay their tensors' own: keep those
//! tensors alive, and unshared where an op updates them in place, while the graph may be launched.
use super::capture::{Footprint, NodeKind};
use super::context::Context;
use super::error::{DriverResultExt, Error, Result};
use super::pool::GraphMemory;
use super::profiler::ProfiledKind;
use super::stream::Stream;
use cudarc::driver::{result, sys};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::Arc;

/// A captured, instantiated graph: replay it with [`Graph::launch`]. `Send`; dropping it waits
/// for its replays, then frees it and returns its memory to the pool.
pub struct Graph {
    parts: Option<GraphParts>,
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.parts {
            Some(p) => write!(f, "Graph(stream {:#x})", p.stream.id()),
            None => write!(f, "Graph(dropped)"),
        }
    }
}

/// The driver handles and memory of a graph.
pub(crate) struct GraphParts {
    exec: sys::CUgraphExec,
    graph: sys::CUgraph,
    stream: Arc<Stream>,
    memory: Arc<GraphMemory>,
    /// Its kernels and copies (for the profiler).
    nodes: usize,
}
// SAFETY: the handles are used by one owner at a time (`Graph` is not `Sync`); the driver allows
// graph handles on any thread.
unsafe impl Send for GraphParts {}

impl Drop for GraphParts {
    fn drop(&mut self) {
        // A failed wait (a broken context) leaks the staged host buffers rather than free memory
        // a replay may still read.
        let synced = self.stream.device.bind().and_then(|()| {
            // SAFETY: the stream is live (held by this graph).
            unsafe { result::stream::synchronize(self.stream.raw()) }.call("cuStreamSynchronize")
        });
        // SAFETY: both handles are live and dropped once; the replays have finished.
        unsafe {
            let _ = result::graph::exec_destroy(self.exec);
            let _ = result::graph::destroy(self.graph);
        }
        if synced.is_ok() {
            // SAFETY: the stream was synchronised above: no replay is running.
            unsafe { self.memory.retire() };
        }
    }
}

impl Graph {
    /// Replay the captured work on the stream it was captured on (queued, like any launch).
    pub fn launch(&self) -> Result<()> {
        let parts = self.parts.as_ref().expect("parts live until drop");
        parts.stream.refuse_in_capture("Graph::launch")?;
        parts.stream.device.bind()?;
        let kind = || ProfiledKind::GraphReplay { nodes: parts.nodes };
        // Not queued in a capture (refused above): no edges to find.
        parts.stream.profiled(kind, (Footprint::Opaque, NodeKind::Copy), || {
            // SAFETY: `exec` is a live instantiated graph of this stream's context; every buffer
            // it uses is owned by the graph or, by the contract of `Context::capture`, kept alive
            // by the caller.
            unsafe { result::graph::launch(parts.exec, parts.stream.raw()) }.call("cuGraphLaunch")
        })
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        let Some(parts) = self.parts.take() else { return };
        // Synchronising a stream that is being captured would end that capture: the graph goes
        // when the capture's memory does.
        match parts.stream.capture_memory() {
            Some(current) => current.defer(parts),
            None => drop(parts),
        }
    }
}

impl Context {
    /// Capture the work `record` queues on this context's stream into a [`Graph`]; nothing runs
    /// during the capture. Ops that cannot be captured (host synchronisation, read-backs, uploads
    /// from pageable memory, events, other streams) fail inside `record` with
    /// `Error::NotCapturable`. If `record` fails or panics, the capture is ended and discarded and
    /// its error (or panic) passed on; the stream stays usable. Work that other threads queue on
    /// this stream (through clones of this context) meanwhile is captured too.
    ///
    /// The graph owns the pool memory of the capture; buffers made before it and used by it must
    /// outlive the graph's replays (see the module documentation). The CPU backend has no graphs:
    /// `Error::NoDevice` (run the work eagerly there).
    pub fn capture(&self, record: impl FnOnce() -> Result<()>) -> Result<Graph> {
        let stream = self.stream("capture")?;
        stream.begin_capture()?;
        let outcome = catch_unwind(AssertUnwindSafe(record));
        let (graph, memory) = stream.end_capture();
        let discard = |graph: Option<sys::CUgraph>| {
            if let Some(g) = graph {
                // SAFETY: a graph from cuStreamEndCapture, never instantiated, destroyed once.
                let _ = unsafe { result::graph::destroy(g) };
            }
            // SAFETY: the capture never ran.
            unsafe { memory.retire() };
        };
        let graph = match (outcome, graph) {
            (Ok(Ok(())), Ok(g)) => g,
            (Ok(Ok(())), Err(e)) => {
                discard(None);
                return Err(e);
            }
            (outcome, graph) => {
                discard(graph.ok());
                match outcome {
                    Ok(Err(e)) => return Err(e),
                    Err(panic) => resume_unwind(panic),
                    Ok(Ok(())) => unreachable!("matched above"),
                }
            }
        };
        let mut nodes = 0;
        // SAFETY: `graph` is live; with a null array the call only writes the count.
        let counted = unsafe { sys::cuGraphGetNodes(graph, std::ptr::null_mut(), &mut nodes) }.result();
        if let Err(e) = counted {
            discard(Some(graph));
            return Err(Error::Driver { call: "cuGraphGetNodes", source: e });
        }
        // SAFETY: `graph` is a live graph from the capture.
        match unsafe { result::graph::instantiate(graph, sys::CUgraphInstantiate_flags(0)) } {
            Ok(exec) => {
                Ok(Graph { parts: Some(GraphParts { exec, graph, stream: stream.clone(), memory, nodes }) })
            }
            Err(e) => {
                discard(Some(graph));
                Err(Error::Driver { call: "cuGraphInstantiate", source: e })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::Tensor;

    /// The device, where captures take edges from data (not under FERROCUDA_GRAPH_STREAM_ORDER=1).
    fn gpu_with_data_edges() -> Option<(Context, std::sync::MutexGuard<'static, ()>)> {
        if crate::runtime::capture::stream_order_forced() {
            println!("skipped (FERROCUDA_GRAPH_STREAM_ORDER=1)");
            return None;
        }
        crate::runtime::test_gpu()
    }

    /// The graph's nodes without a predecessor, its edges, and how many of those are
    /// programmatic.
    fn shape_of(graph: &Graph) -> (usize, usize, usize) {
        let g = graph.parts.as_ref().unwrap().graph;
        let (mut roots, mut count) = (0usize, 0usize);
        // SAFETY: `g` is a live graph; with null arrays the calls only write the counts, then
        // fill arrays of `count` entries.
        unsafe {
            sys::cuGraphGetRootNodes(g, std::ptr::null_mut(), &mut roots).result().unwrap();
            sys::cuGraphGetEdges_v2(
                g,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                &mut count,
            )
            .result()
            .unwrap();
            let mut from = vec![std::ptr::null_mut(); count];
            let mut to = vec![std::ptr::null_mut(); count];
            let mut data = vec![std::mem::zeroed::<sys::CUgraphEdgeData>(); count];
            sys::cuGraphGetEdges_v2(g, from.as_mut_ptr(), to.as_mut_ptr(), data.as_mut_ptr(), &mut count)
                .result()
                .unwrap();
            let programmatic = data
                .iter()
                .filter(|e| {
                    e.type_ == sys::CUgraphDependencyType::CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC as u8
                })
                .count();
            (roots, count, programmatic)
        }
    }

    /// Whether kernels of a few blocks launch as programmatic dependents here.
    fn early_starts(ctx: &Context) -> bool {
        let stream = ctx.stream("test").unwrap();
        let f = stream.device.modules.function(crate::kernels::relu_f32.info).unwrap();
        f.dependent
    }

    fn input(ctx: &Context) -> Tensor {
        let data: Vec<f32> = (0..1000).map(|i| ((i * 37 % 101) as f32 - 50.0) / 17.0).collect();
        ctx.from_slice(&data, &[1000]).unwrap()
    }

    #[test]
    fn independent_ops_start_side_by_side_and_a_join_follows_both() {
        let Some((ctx, _serial)) = gpu_with_data_edges() else { return };
        let x = input(&ctx);
        let mut out = None;
        let graph = ctx
            .capture(|| {
                let (a, b) = (x.relu()?, x.add_scalar(1.0)?);
                out = Some(a.mul(&b)?);
                Ok(())
            })
            .unwrap();
        // relu and add_scalar only read x (made before the capture): two roots; mul follows each,
        // through programmatic edges where kernels start early.
        let programmatic = if early_starts(&ctx) { 2 } else { 0 };
        assert_eq!(shape_of(&graph), (2, 2, programmatic));
        graph.launch().unwrap();
        let want = x.relu().unwrap().mul(&x.add_scalar(1.0).unwrap()).unwrap();
        assert_eq!(out.unwrap().to_vec().unwrap(), want.to_vec().unwrap());
    }

    /// Launch metadata uploaded inside a capture, through a kernel's parameters (a few words)
    /// and through a page-locked copy (more): each replay writes it again.
    #[test]
    fn constant_uploads_inside_a_capture_are_replayed() {
        let Some((ctx, _serial)) = crate::runtime::test_gpu() else { return };
        let stream = ctx.stream("test").unwrap().clone();
        for n in [1, 37, crate::shapes::FILL_WORDS_MAX, crate::shapes::FILL_WORDS_MAX + 1, 2000] {
            let words: Vec<u64> =
                (0..n as u64).map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5555).collect();
            let buffer = stream.device.pool.alloc(&stream, 8 * n, "test").unwrap();
            // SAFETY: a fresh buffer of 8·n bytes on this stream; u64 has no padding.
            let graph = ctx.capture(|| unsafe { stream.copy_htod_const(buffer.ptr(), &words) }).unwrap();
            for _ in 0..2 {
                // SAFETY: as above; the poison is overwritten by the replay queued after it.
                unsafe { stream.copy_htod("test", buffer.ptr(), &vec![u64::MAX; n]) }.unwrap();
                graph.launch().unwrap();
                let mut back = vec![0u64; n];
                // SAFETY: the buffer holds n words, written by the replay before this read.
                unsafe { stream.copy_dtoh_sync("test", &mut back, buffer.ptr()) }.unwrap();
                assert_eq!(back, words, "{n} words");
            }
        }
    }

    #[test]
    fn a_block_reused_in_the_capture_is_written_after_its_last_read() {
        let Some((ctx, _serial)) = gpu_with_data_edges() else { return };
        let x = input(&ctx);
        for reuse in [false, true] {
            let (mut out, mut blocks) = (None, (0, 0));
            let graph = ctx
                .capture(|| {
                    let t = x.relu()?;
                    let doubled = t.add(&t)?;
                    blocks.0 = t.device_ptr();
                    // Dropped, t's block is parked for this capture and handed to the next
                    // tensor of its size: add_scalar's output must wait for `add` to read t.
                    let kept = (!reuse).then_some(t);
                    let u = x.add_scalar(2.0)?;
                    blocks.1 = u.device_ptr();
                    drop(kept);
                    out = Some((doubled, u));
                    Ok(())
                })
                .unwrap();
            assert_eq!(blocks.0 == blocks.1, reuse, "the capture reused the block: {reuse}");
            // relu → add (→ add_scalar where it reuses the block); add_scalar alone is a root
            // otherwise.
            let (roots, edges, _) = shape_of(&graph);
            assert_eq!((roots, edges), if reuse { (1, 2) } else { (2, 1) });
            graph.launch().unwrap();
            let (doubled, u) = out.unwrap();
            let r = x.relu().unwrap();
            assert_eq!(doubled.to_vec().unwrap(), r.add(&r).unwrap().to_vec().unwrap());
            assert_eq!(u.to_vec().unwrap(), x.add_scalar(2.0).unwrap().to_vec().unwrap());
        }
    }
}
