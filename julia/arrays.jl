# Julia arrays from the Rust core's plans. The core decided everything (src/layout/ in the Rust
# crate) and sent it in one struct (ArrayPlan); this file only composes
#     unsafe_wrap(parent) -> view(ranges) -> PermutedDimsArray(permutation)
# and ties the foreign memory's lifetime to Julia's garbage collector.

# The plan kinds (PLAN_KIND_*) and option values (INDEX_ORDER_*, COPY_*) are the C header's,
# in julia/abi.jl.

index_order_code(order::Symbol) =
    order === :producer ? INDEX_ORDER_PRODUCER : order === :reversed ? INDEX_ORDER_REVERSED :
    throw(ArgumentError("order must be :producer or :reversed, got :$order"))

copy_code(copy::Union{Nothing,Bool}) = copy === nothing ? COPY_IF_NEEDED : copy ? COPY_ALWAYS : COPY_NEVER

# Storage object (the Array on Julia 1.10, its Memory on ≥ 1.11) -> the TensorOwner of its
# memory; only `unsafe_free!` looks here. Keyed by identity (objectid, confirmed through a
# WeakRef): arrays hash by content, so a WeakKeyDict would confuse two equal imports. Entries
# whose storage was collected are pruned as new ones arrive.
const OWNERS = Dict{UInt,Tuple{WeakRef,TensorOwner}}()
const OWNERS_LOCK = ReentrantLock()
const OWNERS_PRUNE_AT = Ref(64)  # prune when the table doubles: amortised O(1) per import

function register_owner!(storage, owner::TensorOwner)
    lock(OWNERS_LOCK) do
        if length(OWNERS) >= OWNERS_PRUNE_AT[]
            filter!(entry -> entry[2][1].value !== nothing, OWNERS)
            OWNERS_PRUNE_AT[] = max(64, 2 * length(OWNERS))
        end
        OWNERS[objectid(storage)] = (WeakRef(storage), owner)
    end
    return nothing
end

"The owner registered for `storage` (removing the entry), or `nothing`."
function take_owner!(storage)
    lock(OWNERS_LOCK) do
        entry = get(OWNERS, objectid(storage), nothing)
        (entry === nothing || entry[1].value !== storage) && return nothing
        delete!(OWNERS, objectid(storage))
        return entry[2]
    end
end

"Makes `storage`'s collection release `owner`'s tensor (queued: see `release_later!`)."
function tie_to!(storage, owner::TensorOwner)
    finalizer(_ -> release_later!(owner), storage)
    register_owner!(storage, owner)
    return storage
end

"""
Wraps foreign memory as an `Array{T,N}` whose storage releases `owner` when collected.

On Julia ≥ 1.11 the finalizer sits on the `Memory`, not the `Array`: `reshape` and `vec` make
new `Array`s over the same `Memory`, so the first `Array` may die while the memory is in use.
On 1.10 a reshaped array keeps the original array alive, so the `Array` is the storage.
"""
function wrap_foreign(::Type{T}, address::UInt, dims::Dims{N}, owner::TensorOwner) where {T,N}
    pointer = Ptr{T}(address)
    @static if VERSION >= v"1.11"
        storage = unsafe_wrap(Memory{T}, pointer, prod(dims); own=false)
        array = Base.wrap(Array, storage, dims)
    else
        array = unsafe_wrap(Array, pointer, dims; own=false)
        storage = array
    end
    tie_to!(storage, owner)
    return array::Array{T,N}
end

"The storage object behind an array made by `from_dlpack` (or `nothing`)."
function storage_of(A::Array)
    @static if VERSION >= v"1.11"
        return A.ref.mem
    else
        return A
    end
end
# fatou-ignore non-public-access: reshape of a non-Array returns a Base.ReshapedArray, which has no public name
storage_of(A::Union{SubArray,PermutedDimsArray,ReadOnlyArray,Base.ReshapedArray}) = storage_of(parent(A))
@static if VERSION >= v"1.11"
    # Itself: the parent StridedViews makes of an Array (StridedView(A) holds A.ref.mem).
    storage_of(M::Memory) = M
end
storage_of(_) = nothing

result_dims(plan::ArrayPlan) = ntuple(k -> Int(plan.dims[k]), Int(plan.ndims))
result_dims(plan::ArrayPlan, ::Val{N}) where {N} = ntuple(k -> Int(plan.dims[k]), Val(N))
parent_dims(plan::ArrayPlan) = ntuple(p -> Int(plan.parent_dims[p]), Int(plan.ndims))

"The range the view takes of parent dimension `p`."
function view_range(plan::ArrayPlan, p::Int)
    start, step = Int(plan.starts[p]), Int(plan.steps[p])
    return start:step:(start + step * (Int(plan.lengths[p]) - 1))
end

"Composes the view the plan describes over `P`, the parent array."
function compose_view(P::AbstractArray, plan::ArrayPlan)
    N = ndims(P)
    V = plan.needs_view == 0 ? P : view(P, ntuple(p -> view_range(plan, p), N)...)
    plan.needs_permutation == 0 && return V
    return PermutedDimsArray(V, ntuple(k -> Int(plan.permutation[k]), N))
end

"""
The Julia array for a planned import (untyped forms). Copies and empty tensors are ordinary
Julia arrays; views share the tensor's memory through `owner`.
"""
function host_array(plan::ArrayPlan, owner::TensorOwner)
    T = element_type(plan.element_code)
    if plan.kind == PLAN_KIND_VIEW
        return compose_view(wrap_foreign(T, plan.parent_address, parent_dims(plan), owner), plan)
    end
    A = Array{T}(undef, result_dims(plan))
    plan.kind == PLAN_KIND_COPY && copy_into!(A, take_handle!(owner))
    return A
end

"""
The `Array{T,N}` for a planned import of a typed form: the plan is a whole dense parent (no
view, no permutation), an empty tensor, or a copy — never anything else (the core decided).
"""
function dense_array(::Type{T}, ::Val{N}, plan::ArrayPlan, owner::TensorOwner) where {T,N}
    dims = result_dims(plan, Val(N))
    plan.kind == PLAN_KIND_VIEW && return wrap_foreign(T, plan.parent_address, dims, owner)
    A = Array{T,N}(undef, dims)
    plan.kind == PLAN_KIND_COPY && copy_into!(A, take_handle!(owner))
    return A
end

"""
    RsDLPack.unsafe_free!(A)

Releases the tensor behind `A` (an array returned by `from_dlpack`) now, instead of when the
garbage collector finds `A` unreachable: the producer's memory may be freed at once, which
matters for GPU memory. `A` and every view of it must not be used afterwards — reading it is
undefined behaviour. Arrays that `from_dlpack` copied are ordinary Julia arrays: this throws an
`ArgumentError` for them (and for any other array).

For a `CuArray` the producer gets its memory back only once the kernels enqueued on it so far
have finished — those on the stream it was imported on and those on the calling task's
`CUDA.stream()` — so this waits for them, blocking the thread (`CUDA.synchronize()` first waits
CUDA.jl's way, yielding to other tasks; garbage collection on other threads is not held up);
work on other streams must be synchronised first. Inside a CUDA graph capture of the task's
stream the release is queued until the capture has ended.
"""
function unsafe_free!(A::AbstractArray)
    release_if_imported!(A) || throw(ArgumentError(
        "unsafe_free!: this array does not share a DLPack tensor's memory (a copy, not from " *
        "from_dlpack, already freed, or a reshape made on Julia 1.10)"))
    return nothing
end

"Releases the tensor behind `A` now, as `unsafe_free!` does, if `A` shares one; whether it did."
function release_if_imported!(A::AbstractArray)
    storage = storage_of(A)
    owner = storage === nothing ? nothing : take_owner!(storage)
    owner === nothing && return false
    release_now!(owner, release_stream(A), release_stream_keeper(A))
    return true
end

"The stream (a DLPack value; -1: none) `unsafe_free!(A)` also orders after; the CUDA extension answers for CuArrays."
release_stream(A::AbstractArray) = parent(A) === A ? Int64(-1) : release_stream(parent(A))

"""
The object whose finalizer would destroy `release_stream(A)`'s stream (the task's `CuStream`),
rooted until the release has recorded its event there; `nothing` for none. The CUDA extension
answers for CuArrays.
"""
release_stream_keeper(A::AbstractArray) = parent(A) === A ? nothing : release_stream_keeper(parent(A))
