# Julia arrays from the Rust core's plans. The core decided everything (see
# src/layout/mod.rs in the Rust crate); this file only composes
#     unsafe_wrap(parent) -> view(ranges) -> PermutedDimsArray(permutation)
# and ties the foreign memory's lifetime to Julia's garbage collector.

const PLAN_VIEW = 0x00
const PLAN_EMPTY = 0x01
const PLAN_COPY = 0x02

index_order_code(order::Symbol) =
    order === :producer ? 0x00 : order === :reversed ? 0x01 :
    throw(ArgumentError("order must be :producer or :reversed, got :$order"))

copy_code(copy::Union{Nothing,Bool}) = copy === nothing ? Int8(-1) : copy ? Int8(1) : Int8(0)

# Storage object (the Array on Julia 1.10, its Memory on ≥ 1.11) -> the ImportedArray that owns
# its memory; only `unsafe_free!` looks here. Keyed by identity (objectid, confirmed through a
# WeakRef): arrays hash by content, so a WeakKeyDict would confuse two equal imports. Entries
# whose storage was collected are pruned as new ones arrive.
const OWNERS = Dict{UInt,Tuple{WeakRef,Any}}()
const OWNERS_LOCK = ReentrantLock()
const OWNERS_PRUNE_AT = Ref(64)  # prune when the table doubles: amortised O(1) per import

function register_owner!(storage, owner)
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

"""
Wraps foreign memory as an `Array` whose storage releases `owner` when collected.

On Julia ≥ 1.11 the finalizer sits on the `Memory`, not the `Array`: `reshape` and `vec` make
new `Array`s over the same `Memory`, so the first `Array` may die while the memory is in use.
On 1.10 a reshaped array keeps the original array alive, so the `Array` is the storage.
"""
function wrap_foreign(::Type{T}, address::UInt, dims::Dims{N}, owner) where {T,N}
    pointer = Ptr{T}(address)
    @static if VERSION >= v"1.11"
        storage = unsafe_wrap(Memory{T}, pointer, prod(dims); own=false)
        array = Base.wrap(Array, storage, dims)
    else
        array = unsafe_wrap(Array, pointer, dims; own=false)
        storage = array
    end
    finalizer(_ -> Native.release!(owner), storage)
    register_owner!(storage, owner)
    return array
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
storage_of(_) = nothing

dims_of(n::Integer, dim::Function) = ntuple(k -> Int(dim(Int64(k - 1))), Int(n))

"Composes the view the plan describes over `P`, the parent array."
function compose_view(P::AbstractArray, handle)
    N = ndims(P)
    ranges = ntuple(N) do p
        start = Int(Native.range_start(handle, Int64(p - 1)))
        step = Int(Native.range_step(handle, Int64(p - 1)))
        len = Int(Native.range_len(handle, Int64(p - 1)))
        start:step:(start + step * (len - 1))
    end
    permutation = ntuple(k -> Int(Native.permutation(handle, Int64(k - 1))) + 1, N)
    V = all(p -> ranges[p] == 1:size(P, p), 1:N) ? P : view(P, ranges...)
    return permutation == ntuple(identity, N) ? V : PermutedDimsArray(V, permutation)
end

"""
The Julia array for a planned import. Copies and empty tensors are ordinary Julia arrays (the
tensor is released at once); views share the tensor's memory.
"""
function host_array(handle)
    T = element_type(Native.element_code(handle))
    kind = Native.plan_kind(handle)
    if kind == PLAN_EMPTY || kind == PLAN_COPY
        A = Array{T}(undef, dims_of(Native.result_ndims(handle), k -> Native.result_dim(handle, k)))
        try
            if kind == PLAN_COPY
                GC.@preserve A rethrowing_native(() -> Native.copy_into!(handle, UInt(pointer(A)), UInt(sizeof(A))))
            end
        finally
            Native.release!(handle)
        end
        return A
    end
    parent_dims = dims_of(Native.parent_ndims(handle), k -> Native.parent_dim(handle, k))
    P = wrap_foreign(T, Native.parent_address(handle), parent_dims, handle)
    return compose_view(P, handle)
end

"""
    RsDLPack.unsafe_free!(A)

Releases the tensor behind `A` (an array returned by `from_dlpack`) now, instead of when the
garbage collector finds `A` unreachable: the producer's memory may be freed at once, which
matters for GPU memory. `A` and every view of it must not be used afterwards — reading it is
undefined behaviour. Arrays that `from_dlpack` copied are ordinary Julia arrays: this throws an
`ArgumentError` for them (and for any other array).
"""
function unsafe_free!(A::AbstractArray)
    storage = storage_of(A)
    owner = storage === nothing ? nothing : take_owner!(storage)
    owner === nothing && throw(ArgumentError(
        "unsafe_free!: this array does not share a DLPack tensor's memory (a copy, not from " *
        "from_dlpack, already freed, or a reshape made on Julia 1.10)"))
    Native.release!(owner)
    return nothing
end
