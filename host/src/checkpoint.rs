//! Checkpoints in the safetensors format (the `safetensors` crate): a JSON header naming each
//! tensor's dtype, shape and byte range, then the raw little-endian data. PyTorch's
//! `safetensors.torch.load_file` reads what [`save`] writes, and [`load`] reads what
//! `safetensors.torch.save_file` writes, for f32, f16 and bf16 tensors.
use crate::runtime::error::{Error, Result};
use crate::tensor::{DType, Tensor};
use crate::Context;
use half::{bf16, f16};
use safetensors::tensor::{Dtype, SafeTensors, View};
use std::borrow::Cow;
use std::path::Path;

/// One tensor's bytes, read back from the device once.
struct Bytes {
    dtype: Dtype,
    shape: Vec<usize>,
    data: Vec<u8>,
}

impl View for &Bytes {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.data)
    }
    fn data_len(&self) -> usize {
        self.data.len()
    }
}

fn file_dtype(dtype: DType) -> Dtype {
    match dtype {
        DType::F32 => Dtype::F32,
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
    }
}

fn tensor_bytes(t: &Tensor) -> Result<Bytes> {
    let data: Vec<u8> = match t.dtype() {
        DType::F32 => t.to_vec()?.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::F16 => t.to_vec_of::<f16>()?.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::BF16 => t.to_vec_of::<bf16>()?.iter().flat_map(|v| v.to_le_bytes()).collect(),
    };
    Ok(Bytes { dtype: file_dtype(t.dtype()), shape: t.shape().to_vec(), data })
}

fn format_error(op: &'static str, path: &Path, reason: impl std::fmt::Display) -> Error {
    Error::InvalidArgument { op, shape: vec![], reason: format!("{}: {reason}", path.display()) }
}

/// Write `tensors` (unique names) to `path`, with `metadata` as the header's string map (the
/// format's `__metadata__`, e.g. the model's configuration).
pub fn save(
    path: impl AsRef<Path>,
    tensors: &[(String, Tensor)],
    metadata: &[(String, String)],
) -> Result<()> {
    const OP: &str = "checkpoint::save";
    let path = path.as_ref();
    let mut names: Vec<&str> = tensors.iter().map(|(n, _)| n.as_str()).collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(format_error(OP, path, format!("tensor name {:?} twice", w[0])));
    }
    let bytes =
        tensors.iter().map(|(name, t)| Ok((name.as_str(), tensor_bytes(t)?))).collect::<Result<Vec<_>>>()?;
    let info = (!metadata.is_empty()).then(|| metadata.iter().cloned().collect());
    safetensors::serialize_to_file(bytes.iter().map(|(n, b)| (*n, b)), info, path)
        .map_err(|e| format_error(OP, path, e))
}

/// A loaded checkpoint: its tensors (on the context they were loaded to) and header metadata.
#[derive(Debug)]
pub struct Checkpoint {
    pub tensors: Vec<(String, Tensor)>,
    pub metadata: Vec<(String, String)>,
}

impl Checkpoint {
    /// The tensor called `name`, or an `InvalidArgument` naming it.
    pub fn get(&self, name: &str) -> Result<&Tensor> {
        self.tensors.iter().find(|(n, _)| n == name).map(|(_, t)| t).ok_or_else(|| Error::InvalidArgument {
            op: "Checkpoint::get",
            shape: vec![],
            reason: format!("no tensor named {name:?} in the checkpoint"),
        })
    }
    /// The metadata value of `key`.
    pub fn meta(&self, key: &str) -> Option<&str> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

fn decode<T: crate::tensor::Element, const N: usize>(data: &[u8], from: fn([u8; N]) -> T) -> Vec<T> {
    data.chunks_exact(N).map(|c| from(c.try_into().expect("chunks_exact yields N bytes"))).collect()
}

/// Read `path` onto `ctx`, tensors sorted by name. Tensors of dtypes other than f32, f16 and
/// bf16 are an `UnsupportedDType`-style `InvalidArgument` naming the tensor.
pub fn load(ctx: &Context, path: impl AsRef<Path>) -> Result<Checkpoint> {
    const OP: &str = "checkpoint::load";
    let path = path.as_ref();
    let buffer = std::fs::read(path).map_err(|source| Error::Io {
        op: OP,
        path: path.display().to_string(),
        source,
    })?;
    let (_, header) = SafeTensors::read_metadata(&buffer).map_err(|e| format_error(OP, path, e))?;
    let file = SafeTensors::deserialize(&buffer).map_err(|e| format_error(OP, path, e))?;
    let mut tensors = file
        .tensors()
        .into_iter()
        .map(|(name, view)| {
            let (shape, data) = (view.shape(), view.data());
            let t = match view.dtype() {
                Dtype::F32 => ctx.from_slice(&decode(data, f32::from_le_bytes), shape)?,
                Dtype::F16 => ctx.from_slice(&decode(data, f16::from_le_bytes), shape)?,
                Dtype::BF16 => ctx.from_slice(&decode(data, bf16::from_le_bytes), shape)?,
                other => {
                    return Err(format_error(
                        OP,
                        path,
                        format!("tensor {name:?} has dtype {other:?}; f32, f16 and bf16 load"),
                    ))
                }
            };
            Ok((name, t))
        })
        .collect::<Result<Vec<_>>>()?;
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    let mut metadata: Vec<(String, String)> = header
        .metadata()
        .as_ref()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    metadata.sort();
    Ok(Checkpoint { tensors, metadata })
}
