//! Every kernel's signature, declared once, grouped by the module it is built into.
//!
//! Three crates read this table through their own `kernel_table!` macro:
//! - the kernel crate checks each entry against the real kernel (a function-pointer coercion per
//!   kernel, compiled only into the entry's module build): a kernel whose parameters differ from
//!   its entry fails the kernel build;
//! - `build.rs` builds one PTX module per `module` (its package in `gpu-kernels/modules/` enables
//!   the kernel crate's feature of the same name, which selects its kernels), refuses a module
//!   whose `.entry` list differs from its entries, and assembles it for the `arch` given (an
//!   `sm_90a` module exists only as a cubin for compute capability 9.0);
//! - the host crate gets one typed launcher per kernel (`kernels::add_f32.launch(stream, cfg,
//!   (a, b, out, n))`), whose argument tuple is built from these types: a pointer becomes a
//!   `DevPtr<T>` / `DevPtrMut<T>`, a scalar stays itself. A launcher whose arguments drift from
//!   this table is a compile error in the host crate.
//!
//! Entries: `path::to::file { [kernel, ...](parameters); ... }`, one bracket per signature. The
//! modules build in this order, the slowest to assemble first, so that ptxas on one overlaps the
//! rustc build of the next.
kernel_table! {
    module matmul_sm90a("matmul_sm90a", sm_90a) {
        matmul::gemm_wgmma {
            [
                gemm_wgmma_f16_nn, gemm_wgmma_f16_nt, gemm_wgmma_f16_tn, gemm_wgmma_f16_tt,
                gemm_wgmma_bf16_nn, gemm_wgmma_bf16_nt, gemm_wgmma_bf16_tn, gemm_wgmma_bf16_tt,
                gemm_wgmma_f16_nn_256x128, gemm_wgmma_f16_nt_256x128, gemm_wgmma_f16_tn_256x128,
                gemm_wgmma_f16_tt_256x128, gemm_wgmma_bf16_nn_256x128, gemm_wgmma_bf16_nt_256x128,
                gemm_wgmma_bf16_tn_256x128, gemm_wgmma_bf16_tt_256x128,
                gemm_wgmma_f16_nn_128x192, gemm_wgmma_f16_nt_128x192, gemm_wgmma_f16_tn_128x192,
                gemm_wgmma_f16_tt_128x192, gemm_wgmma_bf16_nn_128x192, gemm_wgmma_bf16_nt_128x192,
                gemm_wgmma_bf16_tn_128x192, gemm_wgmma_bf16_tt_128x192,
                gemm_wgmma_f16_nn_128x64, gemm_wgmma_f16_nt_128x64, gemm_wgmma_f16_tn_128x64,
                gemm_wgmma_f16_tt_128x64, gemm_wgmma_bf16_nn_128x64, gemm_wgmma_bf16_nt_128x64,
                gemm_wgmma_bf16_tn_128x64, gemm_wgmma_bf16_tt_128x64, gemm_wgmma_f16_nn_swapped_128x64,
                gemm_wgmma_bf16_nn_swapped_128x64, gemm_wgmma_f16_nn_128x320, gemm_wgmma_f16_nt_128x320,
                gemm_wgmma_f16_tn_128x320, gemm_wgmma_f16_tt_128x320, gemm_wgmma_bf16_nn_128x320,
                gemm_wgmma_bf16_nt_128x320, gemm_wgmma_bf16_tn_128x320, gemm_wgmma_bf16_tt_128x320,
                gemm_wgmma_f16_nn_sk, gemm_wgmma_f16_nt_sk, gemm_wgmma_f16_tn_sk, gemm_wgmma_f16_tt_sk,
                gemm_wgmma_bf16_nn_sk, gemm_wgmma_bf16_nt_sk, gemm_wgmma_bf16_tn_sk, gemm_wgmma_bf16_tt_sk,
                gemm_wgmma_f16_nn_256x128_sk, gemm_wgmma_f16_nt_256x128_sk, gemm_wgmma_f16_tn_256x128_sk,
                gemm_wgmma_f16_tt_256x128_sk, gemm_wgmma_bf16_nn_256x128_sk, gemm_wgmma_bf16_nt_256x128_sk,
                gemm_wgmma_bf16_tn_256x128_sk, gemm_wgmma_bf16_tt_256x128_sk, gemm_wgmma_f16_nn_128x192_sk,
                gemm_wgmma_f16_nt_128x192_sk, gemm_wgmma_f16_tn_128x192_sk, gemm_wgmma_f16_tt_128x192_sk,
                gemm_wgmma_bf16_nn_128x192_sk, gemm_wgmma_bf16_nt_128x192_sk, gemm_wgmma_bf16_tn_128x192_sk,
                gemm_wgmma_bf16_tt_128x192_sk
            ](
                maps: crate::shapes::TensorMaps, c: *const u16, bias: *const u16, out: *mut u16, m: usize,
                n: usize, k: usize, stride_c: usize, alpha: f32, beta: f32, activation: u32, batched_a: u32,
                batched_b: u32, k_steps: usize, ws: *mut f32, layers: usize, tma_store: u32, cluster: u32,
                sk_units: u32, sk_flags: *mut u32
            );
            [gemm_wgmma_tf32_nt, gemm_wgmma_tf32_nn, gemm_wgmma_tf32_nn_128x64, gemm_wgmma_f32x3_nt, gemm_wgmma_f32x3_nn_128x64](
                maps: crate::shapes::TensorMaps, c: *const f32, bias: *const f32, out: *mut f32, m: usize,
                n: usize, k: usize, stride_c: usize, alpha: f32, beta: f32, activation: u32, batched_a: u32,
                batched_b: u32, k_steps: usize, ws: *mut f32, layers: usize, tma_store: u32, cluster: u32,
                sk_units: u32, sk_flags: *mut u32
            );
        }
        matmul::gemv_tma {
            [gemv_tma_f32_nn, gemv_tma_f32_nt](
                maps: crate::shapes::TensorMaps, c: *const f32, bias: *const f32, out: *mut f32, m: usize,
                n: usize, k: usize, k_chunk: usize, stride_a: usize, stride_b: usize, stride_c: usize,
                alpha: f32, beta: f32, activation: u32
            );
        }
        conv::forward_wgmma {
            [
                conv2d_fwd_wgmma_tf32, conv2d_fwd_wgmma_tf32_256x128, conv2d_fwd_wgmma_tf32_128x64,
                conv2d_fwd_wgmma_f32x3_128x128, conv2d_fwd_wgmma_f32x3_128x64
            ](
                maps: crate::shapes::TensorMaps, bias: *const f32, out: *mut f32, m: usize, n: usize,
                k: usize, c_steps: u32, taps_s: u32, dilation_h: u32, dilation_w: u32, padding_h: u32,
                padding_w: u32, box_q_shift: u32, box_p_shift: u32, boxes_q: u32, boxes_p: u32, images: u32,
                channels: u32, rows: u32, cols: u32
            );
        }
        conv::backward_weight_wgmma {
            [
                conv2d_bwd_weight_wgmma_tf32, conv2d_bwd_weight_wgmma_tf32_256x128,
                conv2d_bwd_weight_wgmma_tf32_128x64, conv2d_bwd_weight_wgmma_f32x3_128x128,
                conv2d_bwd_weight_wgmma_f32x3_128x64
            ](
                maps: crate::shapes::TensorMaps, out: *mut f32, ws: *mut f32, m: usize, n: usize, k: usize,
                k_steps: usize, layers: usize, q_steps: u32, rows: u32, taps_s: u32, dilation_h: u32,
                dilation_w: u32, padding_h: u32, padding_w: u32
            );
        }
    }
    module attention_sm90a("attention_sm90a", sm_90a) {
        attention::forward_wgmma {
            [
                attention_fwd_wgmma_f16_d64, attention_fwd_wgmma_f16_d128, attention_fwd_wgmma_bf16_d64,
                attention_fwd_wgmma_bf16_d128
            ](
                maps: crate::shapes::TensorMaps, out: *mut u16, out_row: usize, out_head: usize,
                out_batch: usize, lse: *mut f32, sq: usize, sk: usize, hq: usize, hkv: usize,
                scale_log2: f32, causal: u32, flat: u32
            );
        }
    }
    module attention_bwd_sm90a("attention_bwd_sm90a", sm_90a) {
        attention::backward_wgmma {
            [attention_bwd_stats_f16, attention_bwd_stats_bf16](
                dout: *const u16, out: *const u16, row: usize, head: usize, batch: usize,
                lse: *const f32, delta: *mut f32, lse2: *mut f32, sq: usize, padded: usize, hq: usize,
                d: usize
            );
            [
                attention_bwd_wgmma_dq_f16_d64, attention_bwd_wgmma_dq_f16_d128,
                attention_bwd_wgmma_dq_bf16_d64, attention_bwd_wgmma_dq_bf16_d128
            ](
                maps: crate::shapes::TensorMaps, lse2: *const f32, delta: *const f32, dq_out: *mut u16,
                dq_row: usize, dq_head: usize, dq_batch: usize, sq: usize, sk: usize, hq: usize,
                hkv: usize, scale: f32, scale_log2: f32, causal: u32, flat: u32
            );
            [
                attention_bwd_wgmma_dkdv_f16_d64, attention_bwd_wgmma_dkdv_f16_d128,
                attention_bwd_wgmma_dkdv_bf16_d64, attention_bwd_wgmma_dkdv_bf16_d128
            ](
                maps: crate::shapes::TensorMaps, lse2: *const f32, delta: *const f32, dk: *mut f32,
                dv: *mut f32, dk16: *mut u16, dv16: *mut u16, kv_row: usize, kv_head: usize,
                kv_batch: usize, sq: usize, sk: usize, hq: usize, hkv: usize,
                scale: f32, scale_log2: f32, causal: u32, flat: u32
            );
        }
    }
    module matmul("matmul", portable) {
        matmul::gemm_f32 {
            [
                gemm_f32_wide_nn, gemm_f32_wide_nt, gemm_f32_wide_tn, gemm_f32_wide_tt,
                gemm_f32_large_nn, gemm_f32_large_nt, gemm_f32_large_tn, gemm_f32_large_tt,
                gemm_f32_medium_nn, gemm_f32_medium_nt, gemm_f32_medium_tn, gemm_f32_medium_tt,
                gemm_f32_small_nn, gemm_f32_small_nt, gemm_f32_small_tn, gemm_f32_small_tt
            ](
                a: *const f32, b: *const f32, c: *const f32, bias: *const f32, out: *mut f32, m: usize,
                n: usize, k: usize, k_chunk: usize, stride_a: usize, stride_b: usize, stride_c: usize,
                alpha: f32, beta: f32, activation: u32
            );
        }
        matmul::gemv {
            [
                gemv_f32_nn_r4, gemv_f32_nt_r4, gemv_f32_nn_r16, gemv_f32_nt_r16
            ](
                a: *const f32, b: *const f32, c: *const f32, bias: *const f32, out: *mut f32,
                ws: *mut f32, m: usize, n: usize, k: usize, k_chunk: usize, stride_a: usize,
                stride_b: usize, stride_c: usize, alpha: f32, beta: f32, activation: u32
            );
            [
                gemv_f16_nn_r4, gemv_f16_nt_r4, gemv_f16_nn_r16, gemv_f16_nt_r16,
                gemv_bf16_nn_r4, gemv_bf16_nt_r4, gemv_bf16_nn_r16, gemv_bf16_nt_r16
            ](
                a: *const u16, b: *const u16, c: *const u16, bias: *const u16, out: *mut u16,
                ws: *mut f32, m: usize, n: usize, k: usize, k_chunk: usize, stride_a: usize,
                stride_b: usize, stride_c: usize, alpha: f32, beta: f32, activation: u32
            );
        }
        matmul::gemv_mma {
            [gemv_mma_f32_nt](
                a: *const f32, b: *const f32, c: *const f32, bias: *const f32, out: *mut f32,
                ws: *mut f32, m: usize, n: usize, k: usize, k_chunk: usize, stride_a: usize,
                stride_b: usize, stride_c: usize, alpha: f32, beta: f32, activation: u32
            );
            [gemv_mma_f16_nn, gemv_mma_f16_nt, gemv_mma_bf16_nn, gemv_mma_bf16_nt](
                a: *const u16, b: *const u16, c: *const u16, bias: *const u16, out: *mut u16,
                ws: *mut f32, m: usize, n: usize, k: usize, k_chunk: usize, stride_a: usize,
                stride_b: usize, stride_c: usize, alpha: f32, beta: f32, activation: u32
            );
        }
        matmul::gemm_reduce {
            [gemm_reduce_f32](
                ws: *const f32, c: *const f32, bias: *const f32, out: *mut f32, m: usize, n: usize,
                slices: usize, stride_c: usize, alpha: f32, beta: f32, activation: u32
            );
            [gemm_reduce_f16, gemm_reduce_bf16](
                ws: *const f32, c: *const u16, bias: *const u16, out: *mut u16, m: usize, n: usize,
                slices: usize, stride_c: usize, alpha: f32, beta: f32, activation: u32
            );
        }
        matmul::gemm_tf32 {
            [gemm_tf32_nn, gemm_tf32_nt, gemm_tf32_tn, gemm_tf32_tt](
                a: *const f32, b: *const f32, c: *const f32, bias: *const f32, out: *mut f32, m: usize,
                n: usize, k: usize, stride_a: usize, stride_b: usize, stride_c: usize, alpha: f32,
                beta: f32, activation: u32
            );
        }
        matmul::gemm_half {
            [
                gemm_f16_nn, gemm_f16_nt, gemm_f16_tn, gemm_f16_tt,
                gemm_bf16_nn, gemm_bf16_nt, gemm_bf16_tn, gemm_bf16_tt
            ](
                a: *const u16, b: *const u16, c: *const u16, bias: *const u16, out: *mut u16, m: usize,
                n: usize, k: usize, k_chunk: usize, stride_a: usize, stride_b: usize, stride_c: usize,
                alpha: f32, beta: f32, activation: u32, ws: *mut f32
            );
        }
    }
    module attention("attention", portable) {
        attention::forward {
            [
                attention_fwd_f16_d32, attention_fwd_f16_d64, attention_fwd_f16_d96, attention_fwd_f16_d128,
                attention_fwd_f16_d256, attention_fwd_bf16_d32, attention_fwd_bf16_d64, attention_fwd_bf16_d96,
                attention_fwd_bf16_d128, attention_fwd_bf16_d256
            ](
                q: *const u16, k: *const u16, v: *const u16, out: *mut u16, lse: *mut f32, sq: usize,
                sk: usize, hq: usize, hkv: usize, scale_log2: f32, causal: u32
            );
        }
        attention::backward {
            [attention_bwd_dot_f16, attention_bwd_dot_bf16](
                dout: *const u16, out: *const u16, delta: *mut f32, rows: usize, d: usize
            );
            [attention_bwd_heads_f16, attention_bwd_heads_bf16](
                part: *const f32, out: *mut u16, n: usize, per_head: usize, hkv: usize, group: usize
            );
            [
                attention_bwd_dq_f16_d32, attention_bwd_dq_f16_d64, attention_bwd_dq_f16_d96,
                attention_bwd_dq_f16_d128, attention_bwd_dq_f16_d256, attention_bwd_dq_bf16_d32,
                attention_bwd_dq_bf16_d64, attention_bwd_dq_bf16_d96, attention_bwd_dq_bf16_d128,
                attention_bwd_dq_bf16_d256
            ](
                q: *const u16, k: *const u16, v: *const u16, dout: *const u16, lse: *const f32,
                delta: *const f32, dq_out: *mut u16, sq: usize, sk: usize, hq: usize, hkv: usize,
                scale: f32, scale_log2: f32, causal: u32
            );
            [
                attention_bwd_dkdv_f16_d32, attention_bwd_dkdv_f16_d64, attention_bwd_dkdv_f16_d96,
                attention_bwd_dkdv_f16_d128, attention_bwd_dkdv_f16_d256, attention_bwd_dkdv_bf16_d32,
                attention_bwd_dkdv_bf16_d64, attention_bwd_dkdv_bf16_d96, attention_bwd_dkdv_bf16_d128,
                attention_bwd_dkdv_bf16_d256
            ](
                q: *const u16, k: *const u16, v: *const u16, dout: *const u16, lse: *const f32,
                delta: *const f32, dk: *mut f32, dv: *mut f32, sq: usize, sk: usize, hq: usize,
                hkv: usize, scale: f32, scale_log2: f32, causal: u32
            );
        }
        attention::heads {
            [attention_heads](
                src: *const u16, dst: *mut u16, b: usize, s: usize, htot: usize, h0: usize, h: usize,
                d: usize, to_heads: u32
            );
        }
    }
    module conv("conv", portable) {
        conv::forward {
            [conv2d_fwd_f32_large, conv2d_fwd_f32_medium, conv2d_fwd_f32_small, conv2d_fwd_tf32](
                a: *const f32, b: *const f32, bias: *const f32, out: *mut f32, n: usize, c: usize,
                h: usize, w: usize, k: usize, r: usize, s: usize, p: usize, q: usize, stride_h: usize,
                stride_w: usize, pad_h: usize, pad_w: usize, dil_h: usize, dil_w: usize, k_chunk: usize
            );
        }
        conv::backward_data {
            [
                conv2d_bwd_data_f32_large, conv2d_bwd_data_f32_medium, conv2d_bwd_data_f32_small,
                conv2d_bwd_data_tf32
            ](
                a: *const f32, b: *const f32, bias: *const f32, out: *mut f32, n: usize, c: usize,
                h: usize, w: usize, k: usize, r: usize, s: usize, p: usize, q: usize, stride_h: usize,
                stride_w: usize, pad_h: usize, pad_w: usize, dil_h: usize, dil_w: usize, k_chunk: usize
            );
        }
        conv::backward_weight {
            [
                conv2d_bwd_weight_f32_large, conv2d_bwd_weight_f32_medium, conv2d_bwd_weight_f32_small,
                conv2d_bwd_weight_tf32
            ](
                a: *const f32, b: *const f32, bias: *const f32, out: *mut f32, n: usize, c: usize,
                h: usize, w: usize, k: usize, r: usize, s: usize, p: usize, q: usize, stride_h: usize,
                stride_w: usize, pad_h: usize, pad_w: usize, dil_h: usize, dil_w: usize, k_chunk: usize
            );
            [conv2d_split_sum_f32](
                partial: *const f32, bias: *const f32, out: *mut f32, len: usize, splits: usize,
                plane: usize, channels: usize
            );
        }
        conv::col2im {
            [conv2d_col2im_f32](
                cols: *const f32, dx: *mut f32, h: usize, w: usize, r: usize, s: usize, p: usize, q: usize,
                stride_h: usize, stride_w: usize, pad_h: usize, pad_w: usize, dil_h: usize, dil_w: usize
            );
        }
        conv::backward_bias {
            [conv2d_bwd_bias_f32](dy: *const f32, db: *mut f32, n: usize, k: usize, pq: usize);
        }
        conv::flip_weights {
            [conv2d_flip_weights_f32](w: *const f32, out: *mut f32, k: usize, c: usize, rs: usize);
        }
        conv::shift_rows {
            [conv2d_shift_rows_f32](
                x: *const f32, out: *mut f32, rows: usize, width: usize, pitch: usize, shifts: u32
            );
        }
    }
    module rows("rows", portable) {
        nn::softmax {
            [
                softmax_f32, log_softmax_f32, softmax_v16_f32, log_softmax_v16_f32, softmax_v8_f32,
                log_softmax_v8_f32, softmax_cluster_f32
            ](
                x: *const f32, out: *mut f32, partials: *mut f32, rows: usize, cols: usize, team: usize,
                chunk: usize, mode: u32
            );
            [
                softmax_f16, log_softmax_f16, softmax_bf16, log_softmax_bf16, softmax_v16_f16,
                log_softmax_v16_f16, softmax_v16_bf16, log_softmax_v16_bf16, softmax_v8_f16,
                log_softmax_v8_f16, softmax_v8_bf16, log_softmax_v8_bf16, softmax_cluster_f16,
                softmax_cluster_bf16
            ](
                x: *const u16, out: *mut u16, partials: *mut f32, rows: usize, cols: usize, team: usize,
                chunk: usize, mode: u32
            );
            [
                softmax_bwd_f32, log_softmax_bwd_f32, softmax_bwd_v16_f32, log_softmax_bwd_v16_f32,
                softmax_bwd_v8_f32, log_softmax_bwd_v8_f32
            ](
                y: *const f32, dy: *const f32, dx: *mut f32, partials: *mut f32, rows: usize, cols: usize,
                team: usize, chunk: usize, mode: u32
            );
            [
                softmax_bwd_f16, log_softmax_bwd_f16, softmax_bwd_bf16, log_softmax_bwd_bf16,
                softmax_bwd_v16_f16, log_softmax_bwd_v16_f16, softmax_bwd_v16_bf16, log_softmax_bwd_v16_bf16,
                softmax_bwd_v8_f16, log_softmax_bwd_v8_f16, softmax_bwd_v8_bf16, log_softmax_bwd_v8_bf16
            ](
                y: *const u16, dy: *const u16, dx: *mut u16, partials: *mut f32, rows: usize, cols: usize,
                team: usize, chunk: usize, mode: u32
            );
        }
        nn::layernorm {
            [layernorm_fwd_f32, layernorm_fwd_v16_f32, layernorm_fwd_v8_f32, layernorm_fwd_cluster_f32](
                x: *const f32, gamma: *const f32, beta: *const f32, y: *mut f32, mean_out: *mut f32,
                rstd_out: *mut f32, partials: *mut f32, rows: usize, cols: usize, team: usize, chunk: usize,
                mode: u32, eps: f32
            );
            [
                layernorm_bwd_dx_f32, layernorm_bwd_dx_v16_f32, layernorm_bwd_dx_v8_f32
            ](
                x: *const f32, gamma: *const f32, dy: *const f32, mean: *const f32, rstd: *const f32,
                dx: *mut f32, partials: *mut f32, rows: usize, cols: usize, team: usize, chunk: usize,
                mode: u32
            );
            [layernorm_bwd_f32](
                x: *const f32, gamma: *const f32, dy: *const f32, residual: *const f32, mean: *const f32,
                rstd: *const f32, dx: *mut f32, partials: *mut f32, counter: *mut u32, dgamma: *mut f32,
                dbeta: *mut f32, rows: usize, cols: usize
            );
            [layernorm_warp_fwd_f32, layernorm_warp_fwd_v2_f32](
                x: *const f32, gamma: *const f32, beta: *const f32, y: *mut f32, mean_out: *mut f32,
                rstd_out: *mut f32, rows: usize, cols: usize, eps: f32
            );
            [layernorm_bwd_params_f32](
                x: *const f32, dy: *const f32, mean: *const f32, rstd: *const f32, partials: *mut f32,
                dgamma: *mut f32, dbeta: *mut f32, rows: usize, cols: usize, c_lanes: usize,
                rows_per_group: usize
            );
            [layernorm_params_sum_f32](
                partials: *const f32, groups: usize, cols: usize, stride: usize, c_lanes: usize, out: *mut f32
            );
            [
                layernorm_fwd_f16, layernorm_fwd_bf16, layernorm_fwd_v16_f16, layernorm_fwd_v16_bf16,
                layernorm_fwd_v8_f16, layernorm_fwd_v8_bf16, layernorm_fwd_cluster_f16,
                layernorm_fwd_cluster_bf16
            ](
                x: *const u16, gamma: *const u16, beta: *const u16, y: *mut u16, mean_out: *mut f32,
                rstd_out: *mut f32, partials: *mut f32, rows: usize, cols: usize, team: usize, chunk: usize,
                mode: u32, eps: f32
            );
            [
                layernorm_bwd_dx_f16, layernorm_bwd_dx_bf16, layernorm_bwd_dx_v16_f16,
                layernorm_bwd_dx_v16_bf16, layernorm_bwd_dx_v8_f16, layernorm_bwd_dx_v8_bf16
            ](
                x: *const u16, gamma: *const u16, dy: *const u16, mean: *const f32, rstd: *const f32,
                dx: *mut u16, partials: *mut f32, rows: usize, cols: usize, team: usize, chunk: usize,
                mode: u32
            );
            [layernorm_bwd_f16, layernorm_bwd_bf16, layernorm_bwd_add_f16, layernorm_bwd_add_bf16](
                x: *const u16, gamma: *const u16, dy: *const u16, residual: *const u16, mean: *const f32,
                rstd: *const f32, dx: *mut u16, partials: *mut f32, counter: *mut u32, dgamma: *mut u16,
                dbeta: *mut u16, rows: usize, cols: usize
            );
            [layernorm_warp_fwd_f16, layernorm_warp_fwd_bf16, layernorm_warp_fwd_v2_f16, layernorm_warp_fwd_v2_bf16](
                x: *const u16, gamma: *const u16, beta: *const u16, y: *mut u16, mean_out: *mut f32,
                rstd_out: *mut f32, rows: usize, cols: usize, eps: f32
            );
            [
                layernorm_warp_bwd_f16, layernorm_warp_bwd_bf16, layernorm_warp_bwd_add_f16,
                layernorm_warp_bwd_add_bf16
            ](
                x: *const u16, gamma: *const u16, dy: *const u16, residual: *const u16, mean: *const f32,
                rstd: *const f32, dx: *mut u16, partials: *mut f32, counter: *mut u32, dgamma: *mut u16,
                dbeta: *mut u16, rows: usize, cols: usize
            );
            [layernorm_bwd_params_f16, layernorm_bwd_params_bf16](
                x: *const u16, dy: *const u16, mean: *const f32, rstd: *const f32, partials: *mut f32,
                dgamma: *mut u16, dbeta: *mut u16, rows: usize, cols: usize, c_lanes: usize,
                rows_per_group: usize
            );
            [layernorm_params_sum_f16, layernorm_params_sum_bf16](
                partials: *const f32, groups: usize, cols: usize, stride: usize, c_lanes: usize, out: *mut u16
            );
        }
        reduce::rows {
            [
                sum_rows_f32, max_rows_f32, min_rows_f32, sum_rows_v16_f32, max_rows_v16_f32,
                min_rows_v16_f32, sum_rows_v8_f32, max_rows_v8_f32, min_rows_v8_f32
            ](
                x: *const f32, partials: *mut f32, out: *mut f32, rows: usize, cols: usize, team: usize,
                chunk: usize, mode: u32, scale: f32
            );
            [
                sum_rows_f16, max_rows_f16, min_rows_f16, sum_rows_bf16, max_rows_bf16, min_rows_bf16,
                sum_rows_v16_f16, max_rows_v16_f16, min_rows_v16_f16, sum_rows_v16_bf16, max_rows_v16_bf16,
                min_rows_v16_bf16, sum_rows_v8_f16, max_rows_v8_f16, min_rows_v8_f16, sum_rows_v8_bf16,
                max_rows_v8_bf16, min_rows_v8_bf16
            ](
                x: *const u16, partials: *mut f32, out: *mut u16, rows: usize, cols: usize, team: usize,
                chunk: usize, mode: u32, scale: f32
            );
        }
    }
    module nn("nn", portable) {
        nn::activation {
            [relu_bwd_f32, sigmoid_bwd_f32, tanh_bwd_f32, gelu_bwd_f32](
                saved: *const f32, dy: *const f32, dx: *mut f32, n: usize
            );
            [
                relu_bwd_f16, sigmoid_bwd_f16, tanh_bwd_f16, gelu_bwd_f16,
                relu_bwd_bf16, sigmoid_bwd_bf16, tanh_bwd_bf16, gelu_bwd_bf16
            ](saved: *const u16, dy: *const u16, dx: *mut u16, n: usize);
        }
        nn::cross_entropy {
            [cross_entropy_f32](
                logits: *const f32, labels: *const u32, partials: *mut f32, loss: *mut f32, grad: *mut f32,
                cols: usize, seg_len: usize, segments: usize, scale: f32, phase: u32, cached: u32
            );
            [cross_entropy_f16, cross_entropy_bf16](
                logits: *const u16, labels: *const u32, partials: *mut f32, loss: *mut f32, grad: *mut u16,
                cols: usize, seg_len: usize, segments: usize, scale: f32, phase: u32, cached: u32
            );
            [cross_entropy_narrow_f32](
                logits: *const f32, labels: *const u32, loss: *mut f32, grad: *mut f32, rows: usize,
                cols: usize, lanes: usize, scale: f32
            );
            [cross_entropy_narrow_f16, cross_entropy_narrow_bf16](
                logits: *const u16, labels: *const u32, loss: *mut f32, grad: *mut u16, rows: usize,
                cols: usize, lanes: usize, scale: f32
            );
            [cross_entropy_cluster_f32](
                logits: *const f32, labels: *const u32, loss: *mut f32, grad: *mut f32, rows: usize, cols: usize,
                team: usize, chunk: usize, scale: f32
            );
        }
        nn::embedding {
            [embedding_f32](
                table: *const f32, ids: *const u32, pos: *const f32, out: *mut f32, n: usize, c: usize, t: usize
            );
            [embedding_f16, embedding_bf16](
                table: *const u16, ids: *const u32, pos: *const u16, out: *mut u16, n: usize, c: usize, t: usize
            );
            [embedding_sort_tile](ids: *const u32, keys: *mut u64, n: usize, k: usize, tile: usize);
            [embedding_sort_step](keys: *mut u64, half: usize, k: usize, j: usize);
            [embedding_bucket_starts](keys: *const u64, starts: *mut u32, n: usize, vocab: usize);
            [embedding_bwd_tiles_f32](dy: *const f32, keys: *const u64, partials: *mut f32, n: usize, c: usize);
            [embedding_bwd_tiles_f16, embedding_bwd_tiles_bf16](
                dy: *const u16, keys: *const u64, partials: *mut f32, n: usize, c: usize
            );
            [embedding_bwd_table_f32](partials: *const f32, starts: *const u32, dtable: *mut f32, c: usize);
            [embedding_bwd_table_f16, embedding_bwd_table_bf16](
                partials: *const f32, starts: *const u32, dtable: *mut u16, c: usize
            );
            [embedding_onehot_b16](ids: *const u32, one: u32, out: *mut u16, n: usize, width: usize);
        }
        nn::loss {
            [mse_loss_f32, bce_loss_f32, bce_with_logits_loss_f32](
                pred: *const f32, target: *const f32, grad: *mut f32, partials: *mut f32, n: usize, scale: f32
            );
        }
        nn::batchnorm {
            [batchnorm_stats_f32](x: *const f32, partials: *mut f32, n: usize, channels: usize, hw: usize);
            [batchnorm_fwd_f32](
                x: *const f32, gamma: *const f32, beta: *const f32, partials: *const f32, y: *mut f32,
                mean_out: *mut f32, rstd_out: *mut f32, running_mean: *mut f32, running_var: *mut f32,
                n: usize, channels: usize, hw: usize, momentum: f32, eps: f32
            );
            [batchnorm_eval_f32](
                x: *const f32, gamma: *const f32, beta: *const f32, running_mean: *const f32,
                running_var: *const f32, y: *mut f32, n: usize, channels: usize, hw: usize, eps: f32
            );
            [batchnorm_bwd_reduce_f32](
                dy: *const f32, x: *const f32, mean: *const f32, rstd: *const f32, partials: *mut f32,
                n: usize, channels: usize, hw: usize
            );
            [batchnorm_bwd_dx_f32](
                dy: *const f32, x: *const f32, gamma: *const f32, mean: *const f32, rstd: *const f32,
                partials: *const f32, dx: *mut f32, dgamma: *mut f32, dbeta: *mut f32, n: usize,
                channels: usize, hw: usize
            );
        }
        nn::dropout {
            [dropout_f32](
                x: *const f32, residual: *const f32, y: *mut f32, n: usize, seed: u64, p: f32, scale: f32
            );
            [dropout_f16, dropout_bf16](
                x: *const u16, residual: *const u16, y: *mut u16, n: usize, seed: u64, p: f32, scale: f32
            );
            [dropout_advance](seeds: *mut u64);
            [dropout_dev_f32](
                x: *const f32, residual: *const f32, y: *mut f32, n: usize, seeds: *const u64, p: f32,
                scale: f32
            );
            [dropout_dev_f16, dropout_dev_bf16](
                x: *const u16, residual: *const u16, y: *mut u16, n: usize, seeds: *const u64, p: f32,
                scale: f32
            );
        }
    }
    module elementwise("elementwise", portable) {
        elementwise::fill {
            [fill_f32](out: *mut f32, value: f32, n: usize);
            [fill_u16](out: *mut u16, bits: u32, n: usize);
            [fill_words](out: *mut u64, n: usize, words: crate::shapes::ParamWords);
        }
        elementwise::binary {
            [add_f32, sub_f32, mul_f32, div_f32](a: *const f32, b: *const f32, out: *mut f32, n: usize);
            [add_scalar_f32, sub_scalar_f32, mul_scalar_f32, div_scalar_f32](
                a: *const f32, s: f32, out: *mut f32, n: usize
            );
            [add_f16, sub_f16, mul_f16, div_f16, add_bf16, sub_bf16, mul_bf16, div_bf16](
                a: *const u16, b: *const u16, out: *mut u16, n: usize
            );
            [
                add_scalar_f16, sub_scalar_f16, mul_scalar_f16, div_scalar_f16,
                add_scalar_bf16, sub_scalar_bf16, mul_scalar_bf16, div_scalar_bf16
            ](a: *const u16, s: f32, out: *mut u16, n: usize);
        }
        elementwise::unary {
            [relu_f32, sigmoid_f32, tanh_f32, gelu_f32](x: *const f32, out: *mut f32, n: usize);
            [relu_f16, sigmoid_f16, tanh_f16, gelu_f16, relu_bf16, sigmoid_bf16, tanh_bf16, gelu_bf16](
                x: *const u16, out: *mut u16, n: usize
            );
        }
        elementwise::convert {
            [convert_f32_f16, convert_f32_bf16](x: *const f32, out: *mut u16, n: usize);
            [convert_f16_f32, convert_bf16_f32](x: *const u16, out: *mut f32, n: usize);
            [convert_f16_bf16, convert_bf16_f16](x: *const u16, out: *mut u16, n: usize);
            [tf32_low_f32](x: *const f32, out: *mut f32, n: usize);
        }
    }
    module pool("pool", portable) {
        pool::max {
            [max_pool2d_f32](
                x: *const f32, y: *mut f32, argmax: *mut u8, planes: usize, h: usize, w: usize, oh: usize,
                ow: usize, kh: usize, kw: usize, sh: usize, sw: usize, ph: usize, pw: usize
            );
            [max_pool2d_2x2_f32](x: *const f32, y: *mut f32, argmax: *mut u8, planes: usize, h: usize, w: usize);
            [max_pool2d_bwd_f32](
                dy: *const f32, argmax: *const u8, dx: *mut f32, planes: usize, h: usize, w: usize,
                oh: usize, ow: usize, kh: usize, kw: usize, sh: usize, sw: usize, ph: usize, pw: usize
            );
            [max_pool2d_2x2_bwd_f32](
                dy: *const f32, argmax: *const u8, dx: *mut f32, planes: usize, h: usize, w: usize
            );
        }
        pool::avg {
            [avg_pool2d_f32](
                x: *const f32, y: *mut f32, planes: usize, h: usize, w: usize, oh: usize, ow: usize,
                kh: usize, kw: usize, sh: usize, sw: usize, ph: usize, pw: usize
            );
            [avg_pool2d_2x2_f32](x: *const f32, y: *mut f32, planes: usize, h: usize, w: usize);
            [avg_pool2d_bwd_f32](
                dy: *const f32, dx: *mut f32, planes: usize, h: usize, w: usize, oh: usize, ow: usize,
                kh: usize, kw: usize, sh: usize, sw: usize, ph: usize, pw: usize
            );
            [avg_pool2d_2x2_bwd_f32](dy: *const f32, dx: *mut f32, planes: usize, h: usize, w: usize);
        }
    }
    module optim("optim", portable) {
        optim::sgd {
            [sgd_step](
                slots: *const u64, chunks: *const u32, lr: f32, momentum: f32, weight_decay: f32,
                nesterov: u32, first_step: u32, clip: *const f32
            );
        }
        optim::adam {
            [adam_step](
                slots: *const u64, chunks: *const u32, lr: f32, beta1: f32, beta2: f32, eps: f32,
                weight_decay: f32, bias_correction1: f32, bias_correction2: f32, decoupled: u32,
                clip: *const f32
            );
            [adam_advance](state: *mut u32, beta1: f32, beta2: f32, lrs: *const f32, lr_steps: u32);
            [adam_step_dev](
                slots: *const u64, chunks: *const u32, beta1: f32, beta2: f32, eps: f32,
                weight_decay: f32, state: *const u32, decoupled: u32, clip: *const f32
            );
        }
        optim::clip {
            [grad_norm](
                slots: *const u64, chunks: *const u32, partials: *mut f32, counter: *mut u32, max_norm: f32,
                out: *mut f32
            );
            [grad_scale](slots: *const u64, chunks: *const u32, norm: *const f32);
        }
    }
    module reduce("reduce", portable) {
        reduce::all {
            [sum_all_f32, max_all_f32, min_all_f32](
                x: *const f32, n: usize, partials: *mut f32, counter: *mut u32, out: *mut f32, scale: f32
            );
            [sum_all_f16, max_all_f16, min_all_f16, sum_all_bf16, max_all_bf16, min_all_bf16](
                x: *const u16, n: usize, partials: *mut f32, counter: *mut u32, out: *mut u16, scale: f32
            );
        }
        reduce::leading {
            [sum_leading_f32](
                x: *const f32, rows: usize, cols: usize, c_lanes: usize, rows_per_group: usize,
                partials: *mut f32, counters: *mut u32, out: *mut f32
            );
            [sum_leading_f16, sum_leading_bf16](
                x: *const u16, rows: usize, cols: usize, c_lanes: usize, rows_per_group: usize,
                partials: *mut f32, counters: *mut u32, out: *mut u16
            );
            [gelu_bwd_sum_leading_f32](
                x: *const f32, dy: *const f32, dx: *mut f32, rows: usize, cols: usize, c_lanes: usize,
                rows_per_group: usize, partials: *mut f32, counters: *mut u32, out: *mut f32
            );
            [gelu_bwd_sum_leading_f16, gelu_bwd_sum_leading_bf16](
                x: *const u16, dy: *const u16, dx: *mut u16, rows: usize, cols: usize, c_lanes: usize,
                rows_per_group: usize, partials: *mut f32, counters: *mut u32, out: *mut u16
            );
        }
    }
    module layout("layout", portable) {
        layout::gather {
            [gather_batch_b32](
                samples: *const u32, labels: *const u32, order: *const u32, state: *mut u32, out: *mut u32,
                out_labels: *mut u32, m: usize, row: usize, size: usize
            );
            [gather_batch_b16](
                samples: *const u16, labels: *const u32, order: *const u32, state: *mut u32, out: *mut u16,
                out_labels: *mut u32, m: usize, row: usize, size: usize
            );
        }
        layout::pad {
            [pad_rows_b16](x: *const u16, rows: usize, cols: usize, pitch: usize, out: *mut u16);
        }
        layout::transpose {
            [transpose_f32](x: *const f32, rows: usize, cols: usize, pitch: usize, out: *mut f32);
            [transpose_split_f32, pad_split_f32](
                x: *const f32, rows: usize, cols: usize, pitch: usize, hi: *mut f32, lo: *mut f32
            );
        }
    }
    module random("random", portable) {
        random::generate {
            [rand_f32, randn_f32](out: *mut f32, n: usize, seed: u64);
        }
    }
    module matmul_tiny("matmul_tiny", portable) {
        matmul::gemm_tiny {
            [gemm_f32_tiny_nn, gemm_f32_tiny_nt, gemm_f32_tiny_tn, gemm_f32_tiny_tt](
                a: *const f32, b: *const f32, c: *const f32, bias: *const f32, out: *mut f32, m: usize,
                n: usize, k: usize, k_chunk: usize, stride_a: usize, stride_b: usize, stride_c: usize,
                alpha: f32, beta: f32, activation: u32
            );
        }
    }
}
