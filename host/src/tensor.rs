//! `Tensor`: a contiguous row-major buffer with a shape and a dtype, on a context.
use crate::runtime::context::{Backend, Context};
use crate::runtime::error::{Error, Result};
use crate::runtime::kernel::{DevPtr, DevPtrMut, DeviceElement};
use crate::runtime::pool::DeviceBuffer;
use crate::runtime::stream::PinnedBuffer;
use half::{bf16, f16};
use std::fmt;
use std::sync::Arc;

/// Element types. Every op has f32 kernels; the elementwise ops and conversions also have f16 and
/// bf16 ones (computing in f32, rounding once); other ops refuse 16-bit tensors by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    F16,
    BF16,
}

impl DType {
    pub fn size_bytes(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::BF16 => 2,
        }
    }

    /// `x` rounded to f32, then (to nearest even) to this type, as an f32: the rounding of the
    /// kernels, which compute in f32. (half's `from_f64` is not used: its bf16 conversion rounds
    /// some values down that round up.)
    pub fn round(self, x: f64) -> f32 {
        let x = x as f32;
        match self {
            DType::F32 => x,
            DType::F16 => f16::from_f32(x).to_f32(),
            DType::BF16 => bf16::from_f32(x).to_f32(),
        }
    }

    /// The 16-bit pattern of `x` in this type (f16 or bf16).
    pub(crate) fn bits16(self, x: f32) -> u16 {
        match self {
            DType::BF16 => bf16::from_f32(x).to_bits(),
            _ => f16::from_f32(x).to_bits(),
        }
    }

    /// 0, 1, 2 for f32, f16, bf16: the index into per-dtype kernel name tables.
    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// A host element type a tensor can be made from and read back into.
pub trait Element: Copy + Send + Sync + 'static {
    const DTYPE: DType;
    fn to_f32(self) -> f32;
    fn from_f32(x: f32) -> Self;
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
    fn to_f32(self) -> f32 {
        self
    }
    fn from_f32(x: f32) -> Self {
        x
    }
}

impl Element for f16 {
    const DTYPE: DType = DType::F16;
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    fn from_f32(x: f32) -> Self {
        f16::from_f32(x)
    }
}

impl Element for bf16 {
    const DTYPE: DType = DType::BF16;
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    fn from_f32(x: f32) -> Self {
        bf16::from_f32(x)
    }
}

pub(crate) enum Storage {
    Cuda(DeviceBuffer),
    /// The CPU backend keeps every dtype's values as f32, each exactly representable in the
    /// tensor's dtype (ops round their results to it).
    Cpu(Vec<f32>),
}

/// An immutable tensor; ops return new tensors. Clones share the buffer.
#[derive(Clone)]
pub struct Tensor {
    ctx: Context,
    storage: Arc<Storage>,
    shape: Vec<usize>,
    dtype: DType,
}

impl AsRef<Tensor> for Tensor {
    fn as_ref(&self) -> &Tensor {
        self
    }
}

impl AsMut<Tensor> for Tensor {
    fn as_mut(&mut self) -> &mut Tensor {
        self
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tensor({:?}, {:?}, {:?})", self.shape, self.dtype, self.ctx)
    }
}

/// Elements of `shape`, refusing products (or byte counts) that overflow.
pub(crate) fn element_count(op: &'static str, shape: &[usize]) -> Result<usize> {
    let n = shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
    match n {
        Some(n) if n.checked_mul(4).is_some_and(|b| b <= isize::MAX as usize) => Ok(n),
        _ => Err(Error::SizeOverflow { op, shape: shape.to_vec() }),
    }
}

impl Context {
    /// A tensor holding `data` (row-major) with `shape`; its dtype is `T`'s.
    pub fn from_slice<T: Element>(&self, data: &[T], shape: &[usize]) -> Result<Tensor> {
        let n = element_count("from_slice", shape)?;
        if n != data.len() {
            return Err(Error::ShapeMismatch {
                op: "from_slice",
                lhs: vec![data.len()],
                rhs: shape.to_vec(),
            });
        }
        match &self.backend {
            Backend::Cpu => {
                Ok(Tensor::from_cpu_as(self, shape, T::DTYPE, data.iter().map(|x| x.to_f32()).collect()))
            }
            Backend::Cuda(_) => {
                let t = Tensor::uninit_as(self, shape, T::DTYPE, "from_slice")?;
                if let (true, Storage::Cuda(buf)) = (n > 0, &*t.storage) {
                    // SAFETY: the fresh buffer of this stream holds `n` elements of `T` (see
                    // `copy_htod` on the pageable source).
                    unsafe { buf.stream().copy_htod("from_slice", buf.ptr(), data) }?;
                }
                Ok(t)
            }
        }
    }

    /// A tensor of zeros.
    pub fn zeros(&self, shape: &[usize]) -> Result<Tensor> {
        self.full(shape, 0.0)
    }

    /// An f32 tensor with every element `value`.
    pub fn full(&self, shape: &[usize], value: f32) -> Result<Tensor> {
        crate::ops::elementwise::fill(self, shape, value, DType::F32)
    }

    /// A tensor of `dtype` with every element `value` (rounded to the dtype).
    pub fn full_as(&self, shape: &[usize], value: f32, dtype: DType) -> Result<Tensor> {
        crate::ops::elementwise::fill(self, shape, value, dtype)
    }

    /// Upload from pinned memory without blocking the host (later host access to `src` waits).
    pub fn from_pinned(&self, src: &PinnedBuffer, shape: &[usize]) -> Result<Tensor> {
        let n = element_count("from_pinned", shape)?;
        if n != src.len() {
            return Err(Error::ShapeMismatch {
                op: "from_pinned",
                lhs: vec![src.len()],
                rhs: shape.to_vec(),
            });
        }
        let stream = self.stream("from_pinned")?.clone();
        let t = Tensor::uninit(self, shape, "from_pinned")?;
        if n > 0 {
            src.begin_copy("from_pinned", &stream, |host| {
                // SAFETY: `host` is pinned memory of `n` floats that stays allocated and unwritten
                // by the host until the copy is known complete; the fresh buffer holds `n` floats.
                unsafe { stream.copy_htod_pinned(t.device_ptr(), host, n * 4) }
            })?;
        }
        Ok(t)
    }
}

impl Tensor {
    pub(crate) fn from_cpu(ctx: &Context, shape: &[usize], data: Vec<f32>) -> Tensor {
        Self::from_cpu_as(ctx, shape, DType::F32, data)
    }

    /// A CPU-backend tensor of `dtype` from values already representable in it.
    pub(crate) fn from_cpu_as(ctx: &Context, shape: &[usize], dtype: DType, data: Vec<f32>) -> Tensor {
        Tensor { ctx: ctx.clone(), storage: Arc::new(Storage::Cpu(data)), shape: shape.to_vec(), dtype }
    }

    /// A tensor whose contents the caller writes before anyone reads them.
    pub(crate) fn uninit(ctx: &Context, shape: &[usize], op: &'static str) -> Result<Tensor> {
        Self::uninit_as(ctx, shape, DType::F32, op)
    }

    /// [`Tensor::uninit`] of any dtype.
    pub(crate) fn uninit_as(
        ctx: &Context,
        shape: &[usize],
        dtype: DType,
        op: &'static str,
    ) -> Result<Tensor> {
        let n = element_count(op, shape)?;
        let storage = match &ctx.backend {
            Backend::Cuda(stream) => {
                Storage::Cuda(stream.device.pool.alloc(stream, n * dtype.size_bytes(), op)?)
            }
            Backend::Cpu => Storage::Cpu(vec![0.0; n]),
        };
        Ok(Tensor { ctx: ctx.clone(), storage: Arc::new(storage), shape: shape.to_vec(), dtype })
    }

    pub(crate) fn storage(&self) -> &Storage {
        &self.storage
    }

    /// Give this tensor a buffer no clone shares (copying it if one does), so it may be updated
    /// in place; returns the CPU data for the CPU backend.
    pub(crate) fn make_unique(&mut self) -> Result<Option<&mut Vec<f32>>> {
        if Arc::get_mut(&mut self.storage).is_none() {
            *self = self.copy()?;
        }
        match Arc::get_mut(&mut self.storage) {
            Some(Storage::Cpu(v)) => Ok(Some(v)),
            _ => Ok(None),
        }
    }

    /// Device address of the buffer (0 for the CPU backend or an empty tensor).
    pub(crate) fn device_ptr(&self) -> u64 {
        match &*self.storage {
            Storage::Cuda(b) => b.ptr(),
            Storage::Cpu(_) => 0,
        }
    }

    /// The buffer as a kernel's input. `T` is the kernel's element type: f32 for F32 tensors, u16
    /// for F16 and BF16 ones (null for the CPU backend or an empty tensor).
    pub(crate) fn ptr<T: DeviceElement>(&self) -> DevPtr<T> {
        debug_assert_eq!(std::mem::size_of::<T>(), self.dtype.size_bytes(), "{self:?} as a kernel input");
        DevPtr::new(self.device_ptr())
    }

    /// `t`'s buffer as a kernel's input, or null.
    pub(crate) fn ptr_or_null<T: DeviceElement>(t: Option<&Tensor>) -> DevPtr<T> {
        t.map_or(DevPtr::null(), Tensor::ptr)
    }

    /// The buffer as a kernel's output; see [`Tensor::ptr`].
    pub(crate) fn ptr_mut<T: DeviceElement>(&self) -> DevPtrMut<T> {
        debug_assert_eq!(std::mem::size_of::<T>(), self.dtype.size_bytes(), "{self:?} as a kernel output");
        DevPtrMut::new(self.device_ptr())
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    pub fn rank(&self) -> usize {
        self.shape.len()
    }
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// The same data under another shape with as many elements (no copy).
    pub fn reshape(&self, shape: &[usize]) -> Result<Tensor> {
        let n = element_count("reshape", shape)?;
        if n != self.len() {
            return Err(Error::ShapeMismatch { op: "reshape", lhs: self.shape.clone(), rhs: shape.to_vec() });
        }
        Ok(Tensor { shape: shape.to_vec(), ..self.clone() })
    }

    /// The elements, row-major (waits for the work that produces them).
    pub fn to_vec(&self) -> Result<Vec<f32>> {
        match (&*self.storage, self.dtype) {
            (Storage::Cpu(v), _) => Ok(v.clone()),
            (Storage::Cuda(_), DType::F32) => self.download::<f32>(),
            (Storage::Cuda(_), DType::F16) => {
                Ok(self.download::<f16>()?.into_iter().map(f16::to_f32).collect())
            }
            (Storage::Cuda(_), DType::BF16) => {
                Ok(self.download::<bf16>()?.into_iter().map(bf16::to_f32).collect())
            }
        }
    }

    /// The elements as `T`, which must be the tensor's dtype (waits for the work that produces
    /// them).
    pub fn to_vec_of<T: Element>(&self) -> Result<Vec<T>> {
        if self.dtype != T::DTYPE {
            return Err(Error::DTypeMismatch { op: "to_vec_of", lhs: self.dtype, rhs: T::DTYPE });
        }
        match &*self.storage {
            Storage::Cpu(v) => Ok(v.iter().map(|&x| T::from_f32(x)).collect()),
            Storage::Cuda(_) => self.download::<T>(),
        }
    }

    /// Copy a CUDA tensor's elements, whose dtype is `T`'s, to the host.
    fn download<T: Element>(&self) -> Result<Vec<T>> {
        let Storage::Cuda(buf) = &*self.storage else {
            unreachable!("download is only called on CUDA storage")
        };
        buf.stream().refuse_in_capture("to_vec")?;
        let mut out = vec![T::from_f32(0.0); self.len()];
        if out.is_empty() {
            buf.stream().synchronize()?;
        } else {
            // SAFETY: the buffer holds `len` elements of `T` (the dtype was checked by the
            // caller), produced on its own stream; f32, f16 and bf16 take any bit pattern.
            unsafe { buf.stream().copy_dtoh_sync("to_vec", &mut out, buf.ptr()) }?;
        }
        Ok(out)
    }

    /// Overwrite the elements with `data` (row-major, the tensor's dtype `T`), in place: the
    /// buffer keeps its address, so a [`Graph`](crate::Graph) that captured reads of it sees the
    /// new values at its next replay (the way to feed a graph new inputs). On CUDA the buffer is
    /// written even where clones share it (they see the new values too); the CPU backend, which
    /// has no graphs, copies a shared buffer first, like the optimizers. Refused during a capture
    /// (`NotCapturable`): upload before the replay instead.
    pub fn copy_from_slice<T: Element>(&mut self, data: &[T]) -> Result<()> {
        const OP: &str = "copy_from_slice";
        if self.dtype != T::DTYPE {
            return Err(Error::DTypeMismatch { op: OP, lhs: self.dtype, rhs: T::DTYPE });
        }
        if data.len() != self.len() {
            return Err(Error::ShapeMismatch { op: OP, lhs: self.shape.clone(), rhs: vec![data.len()] });
        }
        if let Some(v) = self.make_unique_cpu()? {
            v.iter_mut().zip(data).for_each(|(v, d)| *v = d.to_f32());
            return Ok(());
        }
        let Storage::Cuda(buf) = &*self.storage else { unreachable!("CPU storage handled above") };
        if buf.bytes() > 0 {
            // SAFETY: the buffer holds `len` elements of `T` (dtype checked above) on its own
            // stream, where every earlier reader is ordered before the copy (see `copy_htod` on
            // the pageable source).
            unsafe { buf.stream().copy_htod(OP, buf.ptr(), data) }?;
        }
        Ok(())
    }

    /// The CPU data made unique (see [`Tensor::make_unique`]); `None` for CUDA storage, which is
    /// left shared.
    pub(crate) fn make_unique_cpu(&mut self) -> Result<Option<&mut Vec<f32>>> {
        match &*self.storage {
            Storage::Cpu(_) => self.make_unique(),
            Storage::Cuda(_) => Ok(None),
        }
    }

    /// The one element of a one-element tensor.
    pub fn to_scalar(&self) -> Result<f32> {
        if self.len() != 1 {
            return Err(Error::ShapeMismatch { op: "to_scalar", lhs: self.shape.clone(), rhs: vec![] });
        }
        Ok(self.to_vec()?[0])
    }

    /// Download into pinned memory without blocking the host (later host access waits).
    /// `&mut` because the device writes into `dst`: no host slice of it may be alive meanwhile.
    pub fn copy_to_pinned(&self, dst: &mut PinnedBuffer) -> Result<()> {
        self.require_f32("copy_to_pinned")?;
        if dst.len() != self.len() {
            return Err(Error::ShapeMismatch {
                op: "copy_to_pinned",
                lhs: self.shape.clone(),
                rhs: vec![dst.len()],
            });
        }
        let Storage::Cuda(buf) = &*self.storage else {
            return Err(Error::NoDevice("copy_to_pinned needs a CUDA tensor".into()));
        };
        if buf.bytes() == 0 {
            return Ok(());
        }
        dst.begin_copy("copy_to_pinned", buf.stream(), |host| {
            // SAFETY: `host` is pinned memory of `len` floats that the host does not touch until
            // the copy is known complete (`begin_copy` tracks it); the source block is only reused
            // after the copy, in the order of the stream it was queued on.
            unsafe { buf.stream().copy_dtoh_pinned(host, buf.ptr(), buf.bytes()) }
        })
    }

    /// A copy of this tensor on `ctx` (another stream, device or backend).
    pub fn to_context(&self, ctx: &Context) -> Result<Tensor> {
        if let (Storage::Cuda(src), Backend::Cuda(dst_stream)) = (&*self.storage, &ctx.backend) {
            if Arc::ptr_eq(&src.stream().device, &dst_stream.device) {
                ctx.wait_for(&self.ctx)?;
                let t = Tensor::uninit_as(ctx, &self.shape, self.dtype, "to_context")?;
                if src.bytes() > 0 {
                    // SAFETY: both buffers hold `bytes` and the destination stream has waited
                    // for the source's work. The pool would hand the source block out again in
                    // the source stream's order, which does not include this copy: wait for it.
                    unsafe { dst_stream.copy_dtod(t.device_ptr(), src.ptr(), src.bytes()) }?;
                    dst_stream.synchronize()?;
                }
                return Ok(t);
            }
        }
        // Across devices or backends through the host; 16-bit values survive f32 exactly.
        ctx.from_slice(&self.to_vec()?, &self.shape)?.into_dtype(self.dtype)
    }

    pub(crate) fn require_f32(&self, op: &'static str) -> Result<()> {
        match self.dtype {
            DType::F32 => Ok(()),
            dtype => Err(Error::UnsupportedDType { op, dtype }),
        }
    }

    /// Check that `other` can meet `self` in `op`: same queue, same dtype.
    pub(crate) fn check_peer(&self, op: &'static str, other: &Tensor) -> Result<()> {
        if !self.ctx.same_queue(&other.ctx) {
            return Err(self.ctx.mismatch(op, &other.ctx));
        }
        if self.dtype != other.dtype {
            return Err(Error::DTypeMismatch { op, lhs: self.dtype, rhs: other.dtype });
        }
        Ok(())
    }

    /// [`Tensor::check_peer`], and the same shape.
    pub(crate) fn check_pair(&self, op: &'static str, other: &Tensor) -> Result<()> {
        self.check_peer(op, other)?;
        if self.shape != other.shape {
            return Err(Error::ShapeMismatch { op, lhs: self.shape.clone(), rhs: other.shape.clone() });
        }
        Ok(())
    }
}
