//! Transpose and the device-resident dataset's mini-batches on the GPU against the CPU backend
//! (exact: data is only moved).
mod common;
use common::*;
use ferrocuda::{Context, DType, DeviceDataset, Error, Tensor};

fn transpose_matches_cpu(gpu: &Context) {
    let shapes: [[usize; 2]; 9] = [
        [1, 1],
        [1, 31],
        [31, 1000],
        [1000, 31],
        [33, 65],
        [4096, 4097],
        [4097, 4095],
        [1, (1 << 20) + 3],
        [(1 << 20) + 3, 1],
    ];
    for (seed, shape) in shapes.iter().enumerate() {
        let x = randn_host(shape[0] * shape[1], 700 + seed as u64);
        let (xg, xc) = pair(gpu, &x, shape);
        poison_pool(gpu, &[shape[1], shape[0]]);
        let got = xg.transpose().unwrap();
        assert_eq!(got.shape(), &[shape[1], shape[0]]);
        let (got, want) = (got.to_vec().unwrap(), xc.transpose().unwrap().to_vec().unwrap());
        let first_bad = got.iter().zip(&want).position(|(g, w)| g.to_bits() != w.to_bits());
        assert!(first_bad.is_none(), "transpose {shape:?}: first difference at {first_bad:?}");
    }
}

fn transpose_twice_is_identity(gpu: &Context) {
    let x = gpu.randn(&[517, 1029], 3).unwrap();
    let back = x.transpose().unwrap().transpose().unwrap();
    assert_eq!(back.to_vec().unwrap(), x.to_vec().unwrap());
}

fn transpose_of_empty(gpu: &Context) {
    let e = gpu.zeros(&[0, 7]).unwrap().transpose().unwrap();
    assert_eq!(e.shape(), &[7, 0]);
}

fn transpose_needs_a_matrix(gpu: &Context) {
    let t = gpu.zeros(&[2, 3, 4]).unwrap();
    let err = t.transpose().unwrap_err();
    assert!(
        matches!(&err, Error::InvalidArgument { op: "transpose", shape, .. } if shape == &[2, 3, 4]),
        "{err}"
    );
}

fn cpu_transpose_matches_loops() {
    let x = randn_host(31 * 1000, 5);
    let t = Context::cpu().from_slice(&x, &[31, 1000]).unwrap().transpose().unwrap().to_vec().unwrap();
    for r in 0..31 {
        for c in 0..1000 {
            assert_eq!(t[c * 31 + r], x[r * 1000 + c]);
        }
    }
}

/// A dataset of `n` samples shaped `sample` on `ctx` (values from `seed`, labels below 10).
fn dataset(ctx: &Context, n: usize, sample: &[usize], dtype: DType, seed: u64) -> DeviceDataset {
    let mut shape = vec![n];
    shape.extend_from_slice(sample);
    let data = randn_host(shape.iter().product(), seed);
    let labels: Vec<u32> = (0..n).map(|i| ((i * 7 + seed as usize) % 10) as u32).collect();
    let samples = ctx.from_slice(&data, &shape).unwrap().to_dtype(dtype).unwrap();
    DeviceDataset::new(samples, ctx.labels(&labels, 10).unwrap()).unwrap()
}

/// An order over `n` samples: a shuffle with repeats.
fn order(n: usize) -> Vec<usize> {
    (0..n).map(|i| (i * 7919 + i / 3) % n).collect()
}

/// Batches of odd sizes, past the order's end (they wrap), the whole order, one sample; both
/// dtype widths; a new order restarts from its first index.
fn device_dataset_matches_cpu(gpu: &Context) {
    let cpu = Context::cpu();
    for (dtype, sample, n) in
        [(DType::F32, &[37][..], 1000), (DType::BF16, &[3, 5][..], 997), (DType::F16, &[1][..], 1)]
    {
        let (mut g, mut c) = (dataset(gpu, n, sample, dtype, 11), dataset(&cpu, n, sample, dtype, 11));
        for round in 0..2 {
            if round == 1 {
                g.set_order(&order(n)).unwrap();
                c.set_order(&order(n)).unwrap();
            }
            for size in [64, 64, 31, n, 1, 64, 64].into_iter().filter(|&s| s <= n) {
                let what = format!("{dtype:?} {sample:?} round {round} batch {size}");
                let mut shape = vec![size];
                shape.extend_from_slice(sample);
                poison_pool_as(gpu, &shape, dtype);
                let ((xg, lg), (xc, lc)) = (g.next_batch(size).unwrap(), c.next_batch(size).unwrap());
                assert_eq!((xg.shape(), xg.dtype()), (&shape[..], dtype), "{what}");
                assert_same(&what, &xg.to_vec().unwrap(), &xc.to_vec().unwrap());
                assert_eq!(lg.to_vec().unwrap(), lc.to_vec().unwrap(), "{what}: labels");
                assert_eq!(lg.classes(), 10);
            }
        }
    }
}

/// A graph that captured `next_batch` serves the next batch at each replay (the cursor lives on
/// the device), wrapping at the order's end; `set_order` is refused inside a capture.
fn device_dataset_replays_serve_next_batches(gpu: &Context) {
    let cpu = Context::cpu();
    let (mut g, mut c) = (dataset(gpu, 300, &[9], DType::F32, 5), dataset(&cpu, 300, &[9], DType::F32, 5));
    let order = order(300);
    g.set_order(&order).unwrap();
    c.set_order(&order).unwrap();
    let mut seen = gpu.zeros(&[24, 9]).unwrap();
    let graph = gpu
        .capture(|| {
            let (x, _) = g.next_batch(24)?;
            seen.write_rows(0, &x)
        })
        .unwrap();
    for replay in 0..25 {
        graph.launch().unwrap();
        let (want, _) = c.next_batch(24).unwrap();
        assert_same(&format!("replay {replay}"), &seen.to_vec().unwrap(), &want.to_vec().unwrap());
    }
    let err = gpu.capture(|| g.set_order(&order)).unwrap_err();
    assert!(matches!(err, Error::NotCapturable { op: "DeviceDataset::set_order" }), "{err}");
}

/// Bad datasets, orders and batch sizes are typed errors naming the op.
fn device_dataset_bad_input_on(ctx: &Context) {
    let samples = |shape: &[usize]| ctx.zeros(shape).unwrap();
    let labels = |n: usize| ctx.labels(&vec![1; n], 10).unwrap();
    let err = DeviceDataset::new(samples(&[4, 3]), labels(5)).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { op: "DeviceDataset::new", .. }), "{err}");
    for shape in [&[0, 3][..], &[4, 0], &[]] {
        let err =
            DeviceDataset::new(samples(shape), labels(shape.first().copied().unwrap_or(1))).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { op: "DeviceDataset::new", .. }), "{shape:?}: {err}");
    }
    let mut d = DeviceDataset::new(samples(&[4, 3]), labels(4)).unwrap();
    assert_eq!((d.len(), d.is_empty()), (4, false));
    let err = d.set_order(&[0, 1, 2]).unwrap_err();
    assert!(matches!(err, Error::ShapeMismatch { op: "DeviceDataset::set_order", .. }), "{err}");
    let err = d.set_order(&[0, 1, 2, 4]).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "DeviceDataset::set_order", .. }), "{err}");
    d.set_order(&[3, 1, 1, 0]).unwrap();
    for size in [0, 5] {
        let err = d.next_batch(size).unwrap_err();
        assert!(
            matches!(err, Error::InvalidArgument { op: "DeviceDataset::next_batch", .. }),
            "{size}: {err}"
        );
    }
    let (x, l): (Tensor, _) = d.next_batch(2).unwrap();
    assert_eq!((x.shape(), l.to_vec().unwrap()), (&[2, 3][..], vec![1, 1]));
}

fn gpu_device_dataset_bad_input(gpu: &Context) {
    device_dataset_bad_input_on(gpu);
    let other = gpu.new_stream().unwrap();
    let err = DeviceDataset::new(gpu.zeros(&[2, 2]).unwrap(), other.labels(&[0, 1], 2).unwrap()).unwrap_err();
    assert!(matches!(err, Error::DeviceMismatch { op: "DeviceDataset::new", .. }), "{err}");
}

fn cpu_device_dataset_bad_input() {
    device_dataset_bad_input_on(&Context::cpu());
}

fn main() {
    run(&[
        ("gpu_transpose_matches_cpu", Case::Gpu(transpose_matches_cpu)),
        ("gpu_transpose_twice_is_identity", Case::Gpu(transpose_twice_is_identity)),
        ("gpu_transpose_of_empty", Case::Gpu(transpose_of_empty)),
        ("gpu_transpose_needs_a_matrix", Case::Gpu(transpose_needs_a_matrix)),
        ("cpu_transpose_matches_loops", Case::Cpu(cpu_transpose_matches_loops)),
        ("gpu_device_dataset_matches_cpu", Case::Gpu(device_dataset_matches_cpu)),
        (
            "gpu_device_dataset_replays_serve_next_batches",
            Case::Gpu(device_dataset_replays_serve_next_batches),
        ),
        ("gpu_device_dataset_bad_input", Case::Gpu(gpu_device_dataset_bad_input)),
        ("cpu_device_dataset_bad_input", Case::Cpu(cpu_device_dataset_bad_input)),
    ]);
}
