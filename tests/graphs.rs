//! CUDA graphs: replays against eager execution (bit for bit), the graph's ownership of its pool
//! memory, the typed errors of ops a capture cannot record, and the stream after a failed capture.
mod common;
use common::{assert_same, randn_host, run, under_sanitizer, Case};
use ferrocuda::layers::{BatchNorm2d, Conv2d, Dropout, Flatten, Linear, MaxPool2d, Relu};
use ferrocuda::{
    cross_entropy, cross_entropy_labels, Adam, Context, Error, Graph, Layer, Optimizer, Result, Sequential,
    Tensor,
};

/// Matrix product, bias-free activation, softmax and a reduction: several kernel families, pool
/// temporaries freed inside the capture, and a 0-d result.
fn chain(x: &Tensor, w: &Tensor) -> Result<(Tensor, Tensor)> {
    let h = x.matmul(w)?.relu()?.add_scalar(0.5)?;
    let p = h.softmax()?;
    Ok((p.mul(&h)?, p.sum()?))
}

fn chain_replay_matches_eager(ctx: &Context) {
    let (rows, k, cols) = (37, 29, 53);
    let w = ctx.from_slice(&randn_host(k * cols, 1), &[k, cols]).unwrap();
    let mut x = ctx.from_slice(&randn_host(rows * k, 2), &[rows, k]).unwrap();
    let mut out = None;
    let graph = ctx
        .capture(|| {
            out = Some(chain(&x, &w)?);
            Ok(())
        })
        .unwrap();
    let (y, s) = out.unwrap();
    for seed in 3..8 {
        let data = randn_host(rows * k, seed);
        x.copy_from_slice(&data).unwrap();
        graph.launch().unwrap();
        let (want_y, want_s) = chain(&ctx.from_slice(&data, &[rows, k]).unwrap(), &w).unwrap();
        assert_same(&format!("chain output, input {seed}"), &y.to_vec().unwrap(), &want_y.to_vec().unwrap());
        assert_same(&format!("chain sum, input {seed}"), &s.to_vec().unwrap(), &want_s.to_vec().unwrap());
    }
}

/// A capture may be a kernel module's first use (nothing loads every module ahead of a capture):
/// the transpose module loads while the stream is captured (the load time grows inside the
/// capture; this case runs first, and no other case transposes), and the replay matches eager
/// execution.
fn first_use_of_a_module_inside_a_capture(ctx: &Context) {
    let (rows, cols) = (37, 53);
    let mut x = ctx.from_slice(&randn_host(rows * cols, 11), &[rows, cols]).unwrap();
    let loaded = ctx.module_load_time().unwrap();
    let mut out = None;
    let graph = ctx
        .capture(|| {
            out = Some(x.transpose()?);
            Ok(())
        })
        .unwrap();
    assert!(ctx.module_load_time().unwrap() > loaded, "no module loaded inside the capture");
    let y = out.unwrap();
    for seed in 12..15 {
        let data = randn_host(rows * cols, seed);
        x.copy_from_slice(&data).unwrap();
        graph.launch().unwrap();
        let want = ctx.from_slice(&data, &[rows, cols]).unwrap().transpose().unwrap();
        assert_same(&format!("transpose, input {seed}"), &y.to_vec().unwrap(), &want.to_vec().unwrap());
    }
}

/// 64 features → 128 → 10 (`capturable` has nothing to change).
fn mlp(ctx: &Context, _capturable: bool) -> Sequential {
    Sequential::new()
        .layer(Linear::new(ctx, 64, 128, 11).unwrap())
        .layer(Relu::new())
        .layer(Linear::new(ctx, 128, 10, 12).unwrap())
}

/// [1, 8, 8] → conv → batch norm → ReLU → pool → dropout → 10: the CNN example's kinds of layer,
/// with the dropout seed on the device when `capturable`.
fn cnn(ctx: &Context, capturable: bool) -> Sequential {
    Sequential::new()
        .layer(Conv2d::new(ctx, 1, 4, 3, 13).unwrap().padding(1))
        .layer(BatchNorm2d::new(ctx, 4).unwrap())
        .layer(Relu::new())
        .layer(MaxPool2d::new(2))
        .layer(Flatten::new())
        .layer(Dropout::new(0.3, 14).capturable(capturable))
        .layer(Linear::new(ctx, 64, 10, 15).unwrap())
}

fn parameters(model: &mut Sequential) -> Vec<Vec<f32>> {
    model.params_mut().iter().map(|p| p.value().to_vec().unwrap()).collect()
}

fn batch(step: u64, rows: usize) -> (Vec<f32>, Vec<u32>) {
    let x = randn_host(rows * 64, 100 + step);
    let labels = (0..rows as u64).map(|i| ((i * 7 + step * 3) % 10) as u32).collect();
    (x, labels)
}

/// N eager steps (host labels, host-side Adam count, host-seeded dropout) against one eager
/// warm-up step and N − 1 replays of a captured step (static input, device labels, capturable Adam
/// and dropout), on the same data: the same losses and parameters, bit for bit.
fn training_replay_matches_eager(ctx: &Context, build: fn(&Context, bool) -> Sequential, sample: &[usize]) {
    const STEPS: u64 = 6;
    let rows = 48;
    let shape: Vec<usize> = [rows].iter().chain(sample).copied().collect();
    let mut eager = build(ctx, false);
    let mut adam = Adam::new(3e-3);
    let mut eager_losses = Vec::new();
    for step in 0..STEPS {
        let (x, labels) = batch(step, rows);
        let logits = eager.forward(&ctx.from_slice(&x, &shape).unwrap()).unwrap();
        let (loss, dlogits) = cross_entropy(&logits, &labels).unwrap();
        eager.backward(&dlogits).unwrap();
        eager.step(&mut adam).unwrap();
        eager_losses.push(loss.to_vec().unwrap());
    }

    let mut model = build(ctx, true);
    let mut adam = Adam::new(3e-3).capturable(true);
    let (x0, l0) = batch(0, rows);
    let mut x = ctx.from_slice(&x0, &shape).unwrap();
    let mut labels = ctx.labels(&l0, 10).unwrap();
    let step = |model: &mut Sequential, adam: &mut Adam, x: &Tensor, labels: &ferrocuda::Labels| {
        let logits = model.forward(x)?;
        let (loss, dlogits) = cross_entropy_labels(&logits, labels)?;
        model.backward(&dlogits)?;
        model.step(adam)?;
        Ok::<_, Error>(loss)
    };
    let first = step(&mut model, &mut adam, &x, &labels).unwrap();
    assert_same("loss of the eager warm-up step", &first.to_vec().unwrap(), &eager_losses[0]);
    let mut loss = None;
    let graph = ctx
        .capture(|| {
            loss = Some(step(&mut model, &mut adam, &x, &labels)?);
            Ok(())
        })
        .unwrap();
    let loss = loss.unwrap();
    for s in 1..STEPS {
        let (xs, ls) = batch(s, rows);
        x.copy_from_slice(&xs).unwrap();
        labels.copy_from_slice(&ls).unwrap();
        graph.launch().unwrap();
        assert_same(&format!("loss of replay {s}"), &loss.to_vec().unwrap(), &eager_losses[s as usize]);
    }
    for (i, (got, want)) in parameters(&mut model).iter().zip(parameters(&mut eager)).enumerate() {
        assert_same(&format!("parameter {i} after {STEPS} steps"), got, &want);
    }
}

fn mlp_training_replay_matches_eager(ctx: &Context) {
    training_replay_matches_eager(ctx, mlp, &[64]);
}

/// With dropout: each replay draws the next seed's mask, as the eager steps do.
fn cnn_with_dropout_replay_matches_eager(ctx: &Context) {
    training_replay_matches_eager(ctx, cnn, &[1, 8, 8]);
}

/// A host-seeded dropout refuses the capture; a capturable one refuses it before its first
/// forward pass (the device-side count is uploaded then).
fn dropout_capture_errors(ctx: &Context) {
    let x = ctx.full(&[4, 64], 1.0).unwrap();
    let mut host_seeded = Dropout::new(0.5, 1);
    let op = op_of(ctx.capture(|| host_seeded.forward(&x).map(drop)));
    assert!(op.contains("Dropout::capturable"), "{op}");
    let mut fresh = Dropout::new(0.5, 1).capturable(true);
    let op = op_of(ctx.capture(|| fresh.forward(&x).map(drop)));
    assert!(op.contains("first forward pass"), "{op}");
    fresh.forward(&x).unwrap();
    let graph = ctx.capture(|| fresh.forward(&x).map(drop)).unwrap();
    graph.launch().unwrap();
    ctx.synchronize().unwrap();
}

/// Capturable Adam run eagerly is plain Adam, bit for bit (the device computes the bias
/// correction as the host does).
fn capturable_adam_matches_adam(ctx: &Context) {
    let n = 5000;
    let mut p1 = ctx.from_slice(&randn_host(n, 21), &[n]).unwrap();
    let mut p2 = ctx.from_slice(&randn_host(n, 21), &[n]).unwrap();
    let (mut a1, mut a2) = (Adam::adamw(1e-2, 0.01), Adam::adamw(1e-2, 0.01).capturable(true));
    for step in 0..40 {
        let g = ctx.from_slice(&randn_host(n, 200 + step), &[n]).unwrap();
        a1.step(&mut [&mut p1], &[&g]).unwrap();
        a2.step(&mut [&mut p2], &[&g]).unwrap();
    }
    assert_same("parameters after 40 steps", &p2.to_vec().unwrap(), &p1.to_vec().unwrap());
}

fn replays_do_not_grow_the_pool(ctx: &Context) {
    let w = ctx.from_slice(&randn_host(64 * 32, 31), &[64, 32]).unwrap();
    let x = ctx.from_slice(&randn_host(16 * 64, 32), &[16, 64]).unwrap();
    let mut out = None;
    let graph = ctx
        .capture(|| {
            out = Some(chain(&x, &w)?);
            Ok(())
        })
        .unwrap();
    graph.launch().unwrap();
    ctx.synchronize().unwrap();
    let before = ctx.pool_stats().unwrap();
    // 10^4 replays; 200 under compute-sanitizer (FERROCUDA_SANITIZER=1), which slows every launch.
    let replays = if under_sanitizer() { 200 } else { 10_000 };
    for _ in 0..replays {
        graph.launch().unwrap();
    }
    ctx.synchronize().unwrap();
    let after = ctx.pool_stats().unwrap();
    assert_eq!(after.bytes_reserved, before.bytes_reserved, "bytes reserved");
    assert_eq!(after.bytes_in_use, before.bytes_in_use, "bytes in use");
    assert_eq!(after.allocations, before.allocations, "allocations");
    let (_, want) = chain(&x, &w).unwrap();
    assert_same("sum after 10^4 replays", &out.unwrap().1.to_vec().unwrap(), &want.to_vec().unwrap());
}

/// The op a refused capture names (also when a layer's op refused it).
fn op_of(result: Result<Graph>) -> &'static str {
    fn refused(e: &Error) -> Option<&'static str> {
        match e {
            Error::NotCapturable { op } => Some(op),
            Error::Layer { source, .. } => refused(source),
            _ => None,
        }
    }
    match &result {
        Err(e) => refused(e).unwrap_or_else(|| panic!("expected NotCapturable, got {result:?}")),
        Ok(_) => panic!("expected NotCapturable, got {result:?}"),
    }
}

fn host_synchronisation_is_not_capturable(ctx: &Context) {
    let x = ctx.full(&[100], 2.0).unwrap();
    assert_eq!(op_of(ctx.capture(|| x.relu()?.to_vec().map(drop))), "to_vec");
    assert_eq!(op_of(ctx.capture(|| x.sum()?.to_scalar().map(drop))), "to_vec");
    assert_eq!(op_of(ctx.capture(|| ctx.synchronize())), "synchronize");
    assert_eq!(op_of(ctx.capture(|| ctx.from_slice(&[1.0f32; 4], &[4]).map(drop))), "from_slice");
    let mut y = ctx.zeros(&[4]).unwrap();
    assert_eq!(op_of(ctx.capture(|| y.copy_from_slice(&[1.0f32; 4]))), "copy_from_slice");
    let logits = ctx.full(&[3, 10], 0.5).unwrap();
    let op = op_of(ctx.capture(|| cross_entropy(&logits, &[1, 2, 3]).map(drop)));
    assert!(op.contains("cross_entropy"), "{op}");
    assert_eq!(op_of(ctx.capture(|| ctx.trim_pool())), "trim_pool");
    assert_eq!(op_of(ctx.capture(|| ctx.memory_info().map(drop))), "memory_info");
    assert_eq!(op_of(ctx.capture(|| ctx.record_event().map(drop))), "record_event");
    let event = ctx.record_event().unwrap();
    assert_eq!(op_of(ctx.capture(|| event.synchronize())), "Event::synchronize");
    let other = ctx.new_stream().unwrap();
    assert_eq!(op_of(ctx.capture(|| other.wait_for(ctx))), "wait_for");
    let op = op_of(ctx.capture(|| Adam::new(1e-3).step(&mut [x.clone()], &[&x])));
    assert!(op.starts_with("adam"), "{op}");
    // After all of these the stream works, and captures again.
    assert_eq!(x.add_scalar(1.0).unwrap().to_vec().unwrap(), vec![3.0; 100]);
    let graph = ctx.capture(|| x.relu().map(drop)).unwrap();
    graph.launch().unwrap();
    ctx.synchronize().unwrap();
}

fn failed_capture_leaves_the_stream_usable(ctx: &Context) {
    let x = ctx.full(&[1000], -1.5).unwrap();
    let failed = ctx.capture(|| {
        x.relu()?;
        Err(Error::InvalidArgument { op: "test", shape: vec![], reason: "closure failed".into() })
    });
    assert!(matches!(failed, Err(Error::InvalidArgument { op: "test", .. })), "{failed:?}");
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        ctx.capture(|| {
            x.mul_scalar(-1.0)?;
            panic!("closure panicked")
        })
    }));
    assert!(panicked.is_err());
    assert_eq!(x.mul_scalar(-1.0).unwrap().to_vec().unwrap(), vec![1.5; 1000]);
    ctx.synchronize().unwrap();
    let mut y = None;
    let graph = ctx
        .capture(|| {
            y = Some(x.mul_scalar(2.0)?);
            Ok(())
        })
        .unwrap();
    graph.launch().unwrap();
    assert_eq!(y.unwrap().to_vec().unwrap(), vec![-3.0; 1000]);
}

/// Blocks of the capture stay the graph's: tensors made eagerly while it lives never share them,
/// whether the captured tensor was dropped inside the capture or after it; the graph may go
/// before its output tensor.
fn graph_keeps_its_memory(ctx: &Context) {
    let n = 4096;
    let x = ctx.from_slice(&randn_host(n, 41), &[n]).unwrap();
    let mut out = None;
    let graph = ctx
        .capture(|| {
            let tmp = x.mul_scalar(3.0)?;
            let tmp2 = tmp.add_scalar(1.0)?;
            drop(tmp);
            out = Some(tmp2.relu()?);
            Ok(())
        })
        .unwrap();
    let out = out.unwrap();
    // Eager tensors of the same size class, made after the capture, then a replay.
    let eager: Vec<Tensor> = (0..8).map(|i| ctx.full(&[n], i as f32).unwrap()).collect();
    graph.launch().unwrap();
    for (i, t) in eager.iter().enumerate() {
        assert_eq!(t.to_vec().unwrap(), vec![i as f32; n], "eager tensor {i} after a replay");
    }
    let want = x.mul_scalar(3.0).unwrap().add_scalar(1.0).unwrap().relu().unwrap().to_vec().unwrap();
    assert_same("graph output", &out.to_vec().unwrap(), &want);
    // `out` reused `tmp`'s block inside the capture; dropping the graph returns the one parked
    // block (`tmp2`'s, 16 KiB) to the pool, not to the driver; `out`'s block stays with `out`.
    let before = ctx.pool_stats().unwrap();
    drop(graph);
    let after = ctx.pool_stats().unwrap();
    assert_eq!(before.bytes_in_use - after.bytes_in_use, n * 4, "blocks returned by the graph");
    assert_eq!(after.bytes_reserved, before.bytes_reserved, "bytes reserved");
    assert_same("output after the graph is dropped", &out.to_vec().unwrap(), &want);
    let later: Vec<Tensor> = (0..8).map(|_| ctx.full(&[n], 7.0).unwrap()).collect();
    assert_same("output next to later tensors", &out.to_vec().unwrap(), &want);
    let held = ctx.pool_stats().unwrap().bytes_in_use;
    drop(out);
    assert_eq!(held - ctx.pool_stats().unwrap().bytes_in_use, n * 4, "out's block after the graph");
    drop(later);
}

/// Blocks last used on another stream are not taken by a capture (the cross-stream wait would
/// join that stream to it).
fn capture_after_work_on_another_stream(ctx: &Context) {
    let other = ctx.new_stream().unwrap();
    let n = 3000;
    for i in 0..4 {
        drop(other.full(&[n], i as f32).unwrap().relu().unwrap());
    }
    let x = ctx.from_slice(&randn_host(n, 51), &[n]).unwrap();
    let mut y = None;
    let graph = ctx
        .capture(|| {
            y = Some(x.relu()?.add_scalar(2.0)?.mul(&x)?);
            Ok(())
        })
        .unwrap();
    graph.launch().unwrap();
    let want = x.relu().unwrap().add_scalar(2.0).unwrap().mul(&x).unwrap();
    assert_same("capture after another stream", &y.unwrap().to_vec().unwrap(), &want.to_vec().unwrap());
    other.synchronize().unwrap();
}

fn graphs_are_send() {
    fn send<T: Send>() {}
    send::<Graph>();
}

fn cpu_backend_has_no_graphs() {
    let cpu = Context::cpu();
    assert!(matches!(cpu.capture(|| Ok(())), Err(Error::NoDevice(_))));
}

fn cpu_device_labels_match_host_labels() {
    let cpu = Context::cpu();
    let logits = cpu.from_slice(&randn_host(7 * 10, 61), &[7, 10]).unwrap();
    let host = [3, 1, 4, 1, 5, 9, 2];
    let mut labels = cpu.labels(&host, 10).unwrap();
    let (l1, g1) = cross_entropy(&logits, &host).unwrap();
    let (l2, g2) = cross_entropy_labels(&logits, &labels).unwrap();
    assert_same("loss", &l2.to_vec().unwrap(), &l1.to_vec().unwrap());
    assert_same("gradient", &g2.to_vec().unwrap(), &g1.to_vec().unwrap());
    assert!(matches!(labels.copy_from_slice(&[10, 0, 0, 0, 0, 0, 0]), Err(Error::InvalidArgument { .. })));
    assert!(matches!(labels.copy_from_slice(&[1, 2]), Err(Error::ShapeMismatch { .. })));
    assert!(matches!(cpu.labels(&[11], 10), Err(Error::InvalidArgument { .. })));
    let few = cpu.labels(&host, 12).unwrap();
    assert!(matches!(cross_entropy_labels(&logits, &few), Err(Error::InvalidArgument { .. })));
    let mut t = cpu.zeros(&[2, 2]).unwrap();
    let keep = t.clone();
    t.copy_from_slice(&[1.0f32, 2.0, 3.0, 4.0]).unwrap();
    assert_eq!(t.to_vec().unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
    assert_eq!(keep.to_vec().unwrap(), vec![0.0; 4], "the CPU backend copies a shared buffer");
    assert!(matches!(t.copy_from_slice(&[1.0f32]), Err(Error::ShapeMismatch { .. })));
}

fn cpu_capturable_adam_is_adam() {
    let cpu = Context::cpu();
    let mut p1 = cpu.from_slice(&randn_host(100, 71), &[100]).unwrap();
    let mut p2 = p1.copy().unwrap();
    let (mut a1, mut a2) = (Adam::new(1e-2), Adam::new(1e-2).capturable(true));
    for step in 0..5 {
        let g = cpu.from_slice(&randn_host(100, 80 + step), &[100]).unwrap();
        a1.step(&mut [&mut p1], &[&g]).unwrap();
        a2.step(&mut [&mut p2], &[&g]).unwrap();
    }
    assert_same("parameters", &p2.to_vec().unwrap(), &p1.to_vec().unwrap());
}

fn main() {
    run(&[
        ("first_use_of_a_module_inside_a_capture", Case::Gpu(first_use_of_a_module_inside_a_capture)),
        ("chain_replay_matches_eager", Case::Gpu(chain_replay_matches_eager)),
        ("mlp_training_replay_matches_eager", Case::Gpu(mlp_training_replay_matches_eager)),
        ("cnn_with_dropout_replay_matches_eager", Case::Gpu(cnn_with_dropout_replay_matches_eager)),
        ("dropout_capture_errors", Case::Gpu(dropout_capture_errors)),
        ("capturable_adam_matches_adam", Case::Gpu(capturable_adam_matches_adam)),
        ("replays_do_not_grow_the_pool", Case::Gpu(replays_do_not_grow_the_pool)),
        ("host_synchronisation_is_not_capturable", Case::Gpu(host_synchronisation_is_not_capturable)),
        ("failed_capture_leaves_the_stream_usable", Case::Gpu(failed_capture_leaves_the_stream_usable)),
        ("graph_keeps_its_memory", Case::Gpu(graph_keeps_its_memory)),
        ("capture_after_work_on_another_stream", Case::Gpu(capture_after_work_on_another_stream)),
        ("graphs_are_send", Case::Cpu(graphs_are_send)),
        ("cpu_backend_has_no_graphs", Case::Cpu(cpu_backend_has_no_graphs)),
        ("cpu_device_labels_match_host_labels", Case::Cpu(cpu_device_labels_match_host_labels)),
        ("cpu_capturable_adam_is_adam", Case::Cpu(cpu_capturable_adam_is_adam)),
    ]);
}
