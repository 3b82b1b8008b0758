/work/wt-ce-embed/gpu-kernels/target/debug/deps/gpu_kernels-44e4d4441402a3ea.d: src/lib.rs src/prelude/mod.rs src/prelude/shared.rs src/prelude/unroll.rs src/prelude/block.rs src/prelude/half.rs src/prelude/index.rs src/prelude/math.rs src/prelude/memory.rs src/prelude/sync.rs src/prelude/tensor_core.rs src/prelude/warp.rs src/elementwise/mod.rs src/nn/mod.rs src/nn/activation.rs src/nn/batchnorm.rs src/nn/cross_entropy.rs src/nn/dropout.rs src/nn/element.rs src/nn/embedding.rs src/nn/layernorm.rs src/nn/loss.rs src/nn/softmax.rs src/random/mod.rs src/random/philox.rs src/shapes.rs src/kernels.rs Cargo.toml

/work/wt-ce-embed/gpu-kernels/target/debug/deps/libgpu_kernels-44e4d4441402a3ea.rmeta: src/lib.rs src/prelude/mod.rs src/prelude/shared.rs src/prelude/unroll.rs src/prelude/block.rs src/prelude/half.rs src/prelude/index.rs src/prelude/math.rs src/prelude/memory.rs src/prelude/sync.rs src/prelude/tensor_core.rs src/prelude/warp.rs src/elementwise/mod.rs src/nn/mod.rs src/nn/activation.rs src/nn/batchnorm.rs src/nn/cross_entropy.rs src/nn/dropout.rs src/nn/element.rs src/nn/embedding.rs src/nn/layernorm.rs src/nn/loss.rs src/nn/softmax.rs src/random/mod.rs src/random/philox.rs src/shapes.rs src/kernels.rs Cargo.toml

src/lib.rs:
src/prelude/mod.rs:
src/prelude/shared.rs:
src/prelude/unroll.rs:
src/prelude/block.rs:
src/prelude/half.rs:
src/prelude/index.rs:
src/prelude/math.rs:
src/prelude/memory.rs:
src/prelude/sync.rs:
src/prelude/tensor_core.rs:
src/prelude/warp.rs:
src/elementwise/mod.rs:
src/nn/mod.rs:
src/nn/activation.rs:
src/nn/batchnorm.rs:
src/nn/cross_entropy.rs:
src/nn/dropout.rs:
src/nn/element.rs:
src/nn/embedding.rs:
src/nn/layernorm.rs:
src/nn/loss.rs:
src/nn/softmax.rs:
src/random/mod.rs:
src/random/philox.rs:
src/shapes.rs:
src/kernels.rs:
Cargo.toml:

# env-dep:CLIPPY_ARGS=
# env-dep:CLIPPY_CONF_DIR
