//! Transpose on the GPU against the CPU backend (exact: data is only moved).
mod common;
use common::*;
use ferrocuda::{Context, Error};

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

fn main() {
    run(&[
        ("gpu_transpose_matches_cpu", Case::Gpu(transpose_matches_cpu)),
        ("gpu_transpose_twice_is_identity", Case::Gpu(transpose_twice_is_identity)),
        ("gpu_transpose_of_empty", Case::Gpu(transpose_of_empty)),
        ("gpu_transpose_needs_a_matrix", Case::Gpu(transpose_needs_a_matrix)),
        ("cpu_transpose_matches_loops", Case::Cpu(cpu_transpose_matches_loops)),
    ]);
}
