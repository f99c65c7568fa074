# The CUDA extension's methods, shared by its two entry modules: ext/RsDLPackCUDACoreExt.jl
# (CUDA.jl 6, where CuArray, streams and the driver live in CUDACore, which array packages depend
# on alone) and ext/RsDLPackCUDAExt.jl (CUDA.jl 5.4-5.x). Each binds `CUDA` to the module that
# holds these names and brings in `CuArray`, `CuContext`, `CuPtr` and `CuStream`; only methods
# of hooks the package declares (julia/cuda.jl).
#
# Every CUDA name used here, traced in CUDACore 6.0.0 and 6.3.0 (CUDACore/...) and in CUDA.jl
# 5.4.0 and 5.11.3 (the same files without the CUDACore/ prefix):
#   CuArray (src/array.jl, exported; `unsafe_wrap(CuArray, ::CuPtr, dims; own)` and
#   `CuArray{T}(undef, dims)` (also with an `Int` length) there; field `data`, whose `rc` is read only if present),
#   StridedCuArray (src/array.jl, exported), device(::CuArray) (src/array.jl), CuPtr
#   (src/pointer.jl, exported), CuContext with field `handle` and the inner constructor
#   `CuContext(::CUcontext)` (lib/cudadrv/context.jl, exported), CuStream with field `handle`
#   and `Base.unsafe_convert(::Type{CUstream}, ::CuStream)` (lib/cudadrv/stream.jl, exported),
#   stream(), device(), deviceid (lib/cudadrv/state.jl and devices.jl, exported).
# fatou-ignore-file type-piracy: an extension adds methods to RsDLPack's own hooks for its trigger package's types
# fatou-ignore-file non-public-access: an extension is part of RsDLPack and calls the hooks it declares for extensions

import RsDLPack
using RsDLPack: Native, KDLCUDA, PLAN_KIND_VIEW, PLAN_KIND_EMPTY, ArrayPlan, StridedPlan, TensorOwner

# The driver's handle types, taken from the public structs that hold them: CUDA.jl 6 keeps
# `CUstream` and `CUcontext` in CUDACore without making them public, so `CUDA.CUstream` is an
# UndefVarError there (CUDA.jl 5.4-5.11 define both in CUDA itself). Every other CUDA name used
# here is public in 6.0-6.3 and defined in 5.4-5.11.
const CUstream = fieldtype(CuStream, :handle)
const CUcontext = fieldtype(CuContext, :handle)

"DLPack's value for a CuStream: its handle, or 1 (legacy default) for the null stream."
function dlpack_stream(s::CuStream)
    handle = UInt(Base.unsafe_convert(CUstream, s))
    return handle == 0 ? UInt(1) : handle
end

# Import: the consumer's stream is the task-local CUDA.stream(); the producer makes the data
# ready on it before __dlpack__ returns.
RsDLPack.import_options(::Type{<:CuArray}, copy) =
    RsDLPack.ImportOptions(; stream=Int64(dlpack_stream(CUDA.stream())),
                           device=(KDLCUDA, CUDA.deviceid(CUDA.device())), copy=copy)

"""
The object whose collection ends a wrapped CuArray's memory use: the reference-counted data
shared by the CuArray and every reshape of it (CUDA.jl 5.4-6 keep it in `data.rc`; read at
run time), else the CuArray itself.
"""
function storage_keeper(A::CuArray)
    data = getfield(A, :data)
    return hasfield(typeof(data), :rc) ? getfield(data, :rc) : A
end

RsDLPack.storage_of(A::CuArray) = storage_keeper(A)

# The core decides for a CUDA array target: CUDA memory only, views or empty results only (it
# has no device copy engine), typed forms dense.
RsDLPack.plan_target(::Type{<:CuArray}) = RsDLPack.TARGET_CUDA_ARRAY
RsDLPack.is_typed(::Type{<:CuArray{T,N}}) where {T,N} = true

"""
Wraps the plan's parent as a CuArray whose memory keeper releases `owner` when collected. The
import's stream (the task-local one) stays rooted until the release has recorded its event on
it: the core orders the release after its work, and CUDA.jl's finalizer destroys the stream.
"""
function wrap_device(::Type{T}, address::UInt, dims::Dims, owner::TensorOwner) where {T}
    P = unsafe_wrap(CuArray, CuPtr{T}(address), dims; own=false)
    RsDLPack.keep_stream_alive!(owner, CUDA.stream())
    RsDLPack.tie_to!(storage_keeper(P), owner)
    return P
end

wrap_parent(::Type{T}, plan::ArrayPlan, dims::Dims, owner::TensorOwner) where {T} =
    wrap_device(T, plan.parent_address, dims, owner)

# Strided imports (julia/strided.jl; `from_dlpack(StridedView{T,N,<:CuArray}, t)`): the span
# as a flat CuArray, held as a composed view's parent is; an empty result's fresh parent (the
# core makes no device copies).
RsDLPack.span_parent(::Type{<:CuArray}, ::Type{T}, plan::StridedPlan, owner::TensorOwner) where {T} =
    wrap_device(T, plan.span_address, (Int(plan.span_len),), owner)
RsDLPack.fresh_parent(::Type{<:CuArray}, ::Type{T}, n::Int) where {T} = CuArray{T}(undef, n)

# unsafe_free! also waits for the calling task's stream, kept alive (rooted) until the release
# has recorded its event there: a capture of that stream defers the record, and the task (and
# with it its stream) may be collected meanwhile.
RsDLPack.release_stream(::CuArray) = Int64(dlpack_stream(CUDA.stream()))
RsDLPack.release_stream_keeper(::CuArray) = CUDA.stream()

# The core plans a CUDA target as a view or an empty result only (it has no device copy engine):
# any other kind is a bug, reported as one rather than answered with uninitialised memory (the
# throw releases the tensor: `owned_import`).
function not_for_cuda(plan::ArrayPlan)
    return RsDLPack.DLPackError(:internal, "the core planned a CUDA array import as kind $(plan.kind) " *
                                           "(neither a view nor empty); please report this")
end

function RsDLPack.wrap_imported(::Type{<:CuArray}, plan::ArrayPlan, owner::TensorOwner)
    T = RsDLPack.element_type(plan.element_code)
    plan.kind == PLAN_KIND_EMPTY && return CuArray{T}(undef, RsDLPack.result_dims(plan))
    plan.kind == PLAN_KIND_VIEW || throw(not_for_cuda(plan))
    P = wrap_parent(T, plan, RsDLPack.parent_dims(plan), owner)
    return RsDLPack.compose_view(P, plan)
end

function RsDLPack.wrap_imported(::Type{<:CuArray{T,N}}, plan::ArrayPlan, owner::TensorOwner) where {T,N}
    dims = RsDLPack.result_dims(plan, Val(N))
    plan.kind == PLAN_KIND_EMPTY && return CuArray{T,N}(undef, dims)
    plan.kind == PLAN_KIND_VIEW || throw(not_for_cuda(plan))
    return wrap_parent(T, plan, dims, owner)
end

# Export: device memory, ordered after the task-local stream the array was written on.
cu_device(A::CuArray) = CUDA.device(A)
cu_device(A::AbstractArray) = cu_device(parent(A))

RsDLPack.array_address(A::CUDA.StridedCuArray) = reinterpret(UInt, pointer(A))
RsDLPack.array_device(A::CUDA.StridedCuArray) = (KDLCUDA, Int32(CUDA.deviceid(cu_device(A))))
RsDLPack.producer_stream(::CUDA.StridedCuArray) = dlpack_stream(CUDA.stream())
# The task's stream is rooted with the array, so each __dlpack__ records on it then: writes
# enqueued between `share(A, Py)` and a later `torch.from_dlpack(exporter)` are ordered too.
RsDLPack.share_root(A::CUDA.StridedCuArray) = (A, CUDA.stream())
RsDLPack.share_flags(::CUDA.StridedCuArray) = UInt32(RsDLPack.SHARE_STREAM_KEPT)

function RsDLPack.unsafe_cuda_stream(handle::Integer)
    h = UInt(handle)
    context = CuContext(CUcontext(Native.stream_context(h)))
    return Native.new_stream_object(CuStream, CUstream(h), context)
end

# pyconvert (the PythonCall extension): `pyconvert(CuArray, x)` is `from_dlpack(CuArray, x)` where
# that is a CuArray (a tensor dense in its own order; other layouts are declined), and a CUDA
# tensor on `CUDA.device()` converted to `AbstractArray` (or `Any`) becomes a CuArray or a view
# of one.
RsDLPack.imports_into(::Type{<:CuArray}) = true
RsDLPack.array_type_for(::Val{KDLCUDA}) = CuArray
