# StridedViews.jl for RsDLPack: `from_dlpack(StridedView, t)` holds any layout DLPack allows
# zero-copy (zero, negative, permuted, stepped, overlapping and non-nesting strides) as one
# concrete type, and `share` exports a StridedView without copying. The core plans the view
# (julia/strided.jl, src/layout/strided.rs); this file only builds it and answers the share hooks.
#
# An extension, not a dependency: StridedViews is the array type of Strided.jl and
# TensorOperations, wanted by their users and by no one else, and RsDLPack's own results need
# nothing from it; as a dependency every user would load it (and LinearAlgebra, and its
# PrecompileTools workload from 0.5.1) for a type most never ask for.
#
# StridedViews names used, traced at every tag of the [compat] range, v0.4.0 through v0.4.6 and
# v0.5.0 through v0.5.2: StridedView (exported, src/StridedViews.jl), `struct StridedView{T, N,
# A <: DenseArray, F <: Union{FN, FC, FA, FT}}` with the fields parent, size, strides, offset, op
# (src/stridedview.jl; `const FN = typeof(identity)`), the constructor `StridedView(parent::
# DenseArray, size::NTuple{N,Int}, strides::NTuple{N,Int}, offset::Int, op=identity)` (element
# `I` is `parent[offset + 1 + Σ (I[k]-1)·strides[k]]`: `_computeind`, any signs), Base.parent,
# Base.size and Base.strides of a StridedView, and `Base.conj` of a complex one (op `conj`). The
# constructor makes an Array's `Memory` the parent on Julia 1.11 and later, the Array itself
# (a Vector: `reshape` to its own length) on 1.10, at every tag: either is the storage
# `wrap_foreign` ties the tensor's release to. `StridedView{T}(…)` is not used (from 0.4.2 only).
#
# CUDA: the struct takes any DenseArray parent, CuArray included (GPUArrays' AbstractGPUArray
# <: DenseArray), whatever the strides; `from_dlpack(StridedView{T,N,<:CuArray}, t)` wraps the
# span as a CuArray (the CUDA extension's `span_parent`). StridedViews' own support stops at a
# device pointer — `Base.unsafe_convert(CuPtr{T}, v)` at every 0.4 tag and `pointer(v)` from
# 0.4.3, in its CUDA extension (CUDA.jl 4–5); both in its CUDACore extension at 0.5.x
# (CUDACore 6) — and printing through Adapt (`adapt_structure`): indexing a
# CuArray-backed StridedView is scalar indexing of the CuArray (refused by CUDA.jl outside
# `@allowscalar`), and Base's broadcast, `copy` and `copyto!` over one run element by element on
# the host the same way. Such views are for code that takes their pointer and strides.
# fatou-ignore-file type-piracy: an extension adds methods to RsDLPack's own hooks for its trigger package's types
# fatou-ignore-file non-public-access: an extension is part of RsDLPack and calls the hooks it declares for extensions
module RsDLPackStridedViewsExt

using StridedViews: StridedViews, StridedView
import RsDLPack
using RsDLPack: ReadOnlyArray, StridedPlan, TensorOwner

# The typed form: element type and rank named (`StridedView{Float32,2}`), so the result is
# always a StridedView of them, which has no read-only form.
RsDLPack.is_typed(::Type{<:StridedView{T,N}}) where {T,N} = true

"""
The parent array kind a StridedView type asks for: its third parameter, or that parameter's
bound — `DenseArray` when it names none (a host `Vector`), `CuArray` for
`StridedView{T,N,<:CuArray}` (the CUDA extension's parents). Generated, so that it is a
constant wherever the type is known (the typed forms infer); it reads the type's structure only.
"""
@generated function parent_kind(::Type{S}) where {S<:StridedView}
    A = Base.unwrap_unionall(S).parameters[3]
    return :($(A isa TypeVar ? A.ub : A))
end

function strided_view(::Type{P}, ::Type{T}, rank::Val, plan::StridedPlan, owner::TensorOwner) where {P,T}
    parent, dims, steps, offset = RsDLPack.strided_parts(P, T, rank, plan, owner)
    return StridedViews.StridedView(parent, dims, steps, offset)  # op identity
end

# What builds the view from the plan: of the named element type and rank (the typed form, whose
# type is then known), else of the plan's.
maker(::Type{P}, ::Type{<:StridedView{T,N}}) where {P,T,N} =
    (plan, owner) -> strided_view(P, T, Val(N), plan, owner)
maker(::Type{P}, ::Type) where {P} =
    (plan, owner) -> strided_view(P, RsDLPack.element_type(plan.element_code), Val(Int(plan.ndims)), plan, owner)

# `from_dlpack(StridedView…, obj)` (documented with `from_dlpack`): the typed form always
# returns a StridedView{T,N}; the untyped one a ReadOnlyArray of the view over read-only memory.
function RsDLPack.import_dlpack(pointer_of, ::Type{S}, obj; copy::Union{Nothing,Bool}=nothing,
                                order::Symbol=:producer, readonly::Bool=false,
                                decline::Bool=false) where {S<:StridedView}
    P = parent_kind(S)
    typed = RsDLPack.is_typed(S)
    request = RsDLPack.strided_request(P, RsDLPack.requested_element(S), RsDLPack.requested_rank(S);
                                       copy, order, readonly)
    result, read_only = RsDLPack.import_strided(maker(P, S), pointer_of, P, obj, request, typed; copy, decline)
    return !typed && read_only ? ReadOnlyArray(result) : result
end

# pyconvert (the PythonCall extension): `pyconvert(StridedView, x)` is `from_dlpack(StridedView, x)`,
# a copy where the memory is read-only (a StridedView has no read-only form).
RsDLPack.imports_into(::Type{<:StridedView}) = true

# unsafe_free! and release ordering: the parent is the storage the release is tied to.
RsDLPack.storage_of(A::StridedView) = RsDLPack.storage_of(parent(A))

# share: a StridedView is its parent's memory from `offset` on, with its own size and strides.
# Only with op `identity`: under `conj` (or `adjoint`) a consumer would read the parent's
# elements without the op.
RsDLPack.is_strided(::StridedView{<:Any,<:Any,<:Any,typeof(identity)}) = true
RsDLPack.is_strided(::StridedView) = false
RsDLPack.not_strided_message(A::StridedView) =
    "share cannot export a StridedView whose op is $(A.op): a consumer would read its parent's " *
    "elements without the op. Share copy(A) instead (a new StridedView with op identity)."
# Modular arithmetic: an empty view's offset may point anywhere, even below its parent.
RsDLPack.array_address(A::StridedView) =
    RsDLPack.array_address(parent(A)) + (A.offset * sizeof(eltype(A))) % UInt
RsDLPack.array_device(A::StridedView) = RsDLPack.array_device(parent(A))
RsDLPack.producer_stream(A::StridedView) = RsDLPack.producer_stream(parent(A))

end # module
