//! Eight threads on four streams at once: pinned uploads (from one shared buffer and from each
//! thread's own), downloads into pinned memory, small ops, optimizer steps and pool trims, all
//! interleaved, every result checked. 10^5 iterations in all; under compute-sanitizer
//! (`FERROCUDA_SANITIZER=1`), which slows every launch and copy by orders of magnitude, 2,000.
mod common;
use common::*;
use ferrocuda::{Adam, Context, Optimizer, Sgd, Tensor};

const THREADS: usize = 8;
const STREAMS: usize = 4;
/// Elements per upload: odd, a few pool size classes apart from the optimizer's tensors.
const N: usize = 4099;
const PARAMS: [usize; 3] = [257, 1, 3001];

fn params(ctx: &Context, seed: u64) -> Vec<Tensor> {
    PARAMS
        .iter()
        .enumerate()
        .map(|(i, &n)| ctx.from_slice(&randn_host(n, seed + i as u64), &[n]).unwrap())
        .collect()
}

/// What one thread does; panics (failing the test) on the first wrong result.
fn worker(t: usize, ctx: &Context, shared: &ferrocuda::PinnedBuffer, shared_data: &[f32], iterations: usize) {
    let seed = 1000 * t as u64;
    let mut own = ctx.pinned(N).unwrap();
    let mut back = ctx.pinned(N).unwrap();
    let mut p = params(ctx, seed);
    let g = params(ctx, seed + 10);
    let (mut adam, mut sgd) = (Adam::new(1e-3), Sgd::new(1e-2).momentum(0.9));
    let (mut adam_steps, mut sgd_steps, mut order) = (0, 0, Vec::new());
    let trim_every = (iterations / 12).max(1);
    let check_every = (iterations / 50).max(1);
    let mut last = None;
    for i in 0..iterations {
        match i % 6 {
            0 => {
                let x = ctx.from_pinned(shared, &[N]).unwrap().mul_scalar(2.0).unwrap();
                last = Some(x);
            }
            1 => {
                let value = (t * iterations + i) as f32;
                own.as_mut_slice().unwrap().fill(value);
                let x = ctx.from_pinned(&own, &[N]).unwrap().add_scalar(1.0).unwrap();
                x.copy_to_pinned(&mut back).unwrap();
                let got = back.as_slice().unwrap();
                assert!(got.iter().all(|&v| v == value + 1.0), "thread {t} iteration {i}: pinned round trip");
            }
            2 | 4 => {
                adam.step(&mut p, &g).unwrap();
                adam_steps += 1;
                order.push(true);
            }
            3 => {
                sgd.step(&mut p, &g).unwrap();
                sgd_steps += 1;
                order.push(false);
            }
            _ => {
                // A short-lived buffer of a size no one else asks for, back to the pool at once.
                let y = ctx.full(&[N + 7 * t + 1], 0.5).unwrap().relu().unwrap();
                drop(y);
            }
        }
        if i % trim_every == trim_every - 1 {
            ctx.trim_pool().unwrap();
        }
        if i % check_every == check_every - 1 {
            if let Some(x) = last.take() {
                let got = x.to_vec().unwrap();
                let want: Vec<f32> = shared_data.iter().map(|v| v * 2.0).collect();
                assert_same(&format!("thread {t} iteration {i}: upload from the shared buffer"), &got, &want);
            }
        }
    }
    // The same steps, in the same order, on the CPU backend.
    let cpu = Context::cpu();
    let mut want = params(&cpu, seed);
    let cpu_g = params(&cpu, seed + 10);
    let (mut cpu_adam, mut cpu_sgd) = (Adam::new(1e-3), Sgd::new(1e-2).momentum(0.9));
    for &is_adam in &order {
        if is_adam {
            cpu_adam.step(&mut want, &cpu_g).unwrap();
        } else {
            cpu_sgd.step(&mut want, &cpu_g).unwrap();
        }
    }
    assert_eq!(order.len(), adam_steps + sgd_steps);
    for (k, (got, want)) in p.iter().zip(&want).enumerate() {
        assert_close(
            &format!("thread {t} parameter {k} after {adam_steps} Adam and {sgd_steps} SGD steps"),
            &got.to_vec().unwrap(),
            &want.to_vec().unwrap(),
            // Thousands of f32 steps against the f64 twin; a race or a stale buffer is far off.
            1e-3,
        );
    }
}

fn eight_threads_four_streams(gpu: &Context) {
    let sanitizer = under_sanitizer();
    let total = if sanitizer { 2_000 } else { 100_000 };
    let streams: Vec<Context> = (0..STREAMS).map(|_| gpu.new_stream().unwrap()).collect();
    let shared_data = randn_host(N, 7);
    let mut shared = gpu.pinned(N).unwrap();
    shared.as_mut_slice().unwrap().copy_from_slice(&shared_data);
    let started = std::time::Instant::now();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (ctx, shared, shared_data) = (&streams[t % STREAMS], &shared, &shared_data);
            s.spawn(move || worker(t, ctx, shared, shared_data, total / THREADS));
        }
    });
    println!("  {total} iterations on {THREADS} threads in {:.1} s", started.elapsed().as_secs_f64());
    gpu.trim_pool().unwrap();
    let stats = gpu.pool_stats().unwrap();
    assert_eq!(stats.bytes_reserved, stats.bytes_in_use, "{stats:?}");
}

fn main() {
    run(&[("gpu_eight_threads_four_streams", Case::Gpu(eight_threads_four_streams))]);
}
