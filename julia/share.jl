# share: Julia arrays to Python consumers. The exported tensor roots the array in ROOTS until
# the consumer's deleter runs (for CUDA memory: until the work the consumer had enqueued on its
# stream by then has completed, an event the bridge's release queue checks, since consumers call
# the deleter without waiting for it); the deleter may run on any thread, so it only queues the
# root id (in Rust, bridges/python/src/export/roots.rs). Every answer from the bridge says how
# many ids wait, and `unroot_released!` — run then, and by `flush_releases` — drops the roots
# here, on a Julia thread.

const ROOTS = Dict{UInt64,Any}()
const ROOTS_LOCK = ReentrantLock()
const NEXT_ROOT = Threads.Atomic{UInt64}(1)

function root!(A)
    id = Threads.atomic_add!(NEXT_ROOT, UInt64(1))
    lock(() -> (ROOTS[id] = A), ROOTS_LOCK)
    return id
end

function unroot_released!()
    PYTHON_BRIDGE[] == C_NULL && return nothing
    batch = Vector{UInt64}(undef, 64)
    while true
        n = take_released_roots!(batch)
        lock(ROOTS_LOCK) do
            for id in view(batch, 1:n)
                delete!(ROOTS, id)
            end
        end
        n < length(batch) && return nothing
    end
end

"""
How many Julia objects are held because a consumer still uses them: shared arrays, and the
streams imported CuArrays' releases will record on (for tests and debugging).
"""
rooted_count() = lock(() -> length(ROOTS), ROOTS_LOCK)

"""
    share(A, consumer; order=:producer)

Hands the array `A` to the Python callable `consumer` (e.g. `torch.from_dlpack`,
`np.from_dlpack`, `jax.dlpack.from_dlpack`) without copying, and returns what it returns.

`consumer` may also be a Python type that offers the DLPack C exchange API
(`__dlpack_c_exchange_api__`, e.g. `torch.Tensor`): the result is then an object of that type,
made by the type's own C function in the same call into RsDLPack, with no Python-level
`__dlpack__` round trip. A read-only array cannot be shared this way (torch's tensors are
always writable): share it with a function, which sees DLPack's READ_ONLY flag. A Python type
without that API (torch before it had one, `numpy.ndarray`) throws a `DLPackError(:buffer)`
naming it: share with its consumer function instead (`torch.from_dlpack`).

Call from the thread that holds Python's GIL, as for `from_dlpack`: from another thread this
throws a `DLPackError` at once.

`A` may be an `Array`, a strided view (`view` with ranges, including negative steps), a
`PermutedDimsArray` of one, a StridedViews.jl `StridedView` whose op is `identity` (any strides,
zero ones included; with StridedViews loaded), or a [`ReadOnlyArray`](@ref) of one of these
(exported with DLPack's READ_ONLY flag); with Reactant loaded, a `ConcretePJRTArray` (its XLA
buffer, once Reactant's writes to it have finished: the README's "Reactant"). With
`order=:producer` the consumer sees the same indices (`A[i, j] == t[i-1, j-1]`, column-major
strides); `order=:reversed` hands out the reversed dims (a plain `Matrix` becomes a
row-major-compact tensor of size `reverse(size(A))`).

`A` stays alive until the consumer releases the tensor. Pass the type `PyObject` (PyCall) or
`Py` (PythonCall) as `consumer` to get the exporter object itself, which has `__dlpack__`.
"""
function share end

function share(A::AbstractArray, consumer; kwargs...)
    o = python_object(consumer)
    o === nothing && throw(not_python(consumer, "share"))
    return share(A, o; kwargs...)
end

# Where an array's memory is: the address of its first element, DLPack's (device type, id),
# and the CUDA stream its last writes were enqueued on (0 for host memory). The CUDA
# extension adds methods for CuArrays.
array_address(A::AbstractArray) = UInt(pointer(A))
array_device(::AbstractArray) = (KDLCPU, Int32(0))
producer_stream(::AbstractArray) = UInt(0)
# A permutation moves no memory: its first element and device are its parent's.
array_address(A::PermutedDimsArray) = array_address(parent(A))
array_device(A::PermutedDimsArray) = array_device(parent(A))
producer_stream(A::PermutedDimsArray) = producer_stream(parent(A))

# What `share` roots until the consumer releases the tensor: the array, and whatever owns its
# memory where the array may let go of it (the Reactant extension: the buffers a Reactant array
# held when shared, since Reactant gives an array new buffers when it writes it).
share_root(A::AbstractArray) = A
share_root(A::PermutedDimsArray) = (A, share_root(parent(A)))

# Flags of the share: `SHARE_STREAM_KEPT` where `share_root` roots the object whose finalizer
# would destroy `producer_stream`'s stream (the CUDA extension: the task's CuStream), so that
# each `__dlpack__` records on that stream then (ordering writes made after the share too).
share_flags(::AbstractArray) = UInt32(0)
share_flags(A::PermutedDimsArray) = share_flags(parent(A))

"Whether `share` can describe `A` with one pointer and strides (Base's StridedArray misses PermutedDimsArray; the StridedViews extension adds StridedView)."
is_strided(A::AbstractArray) = A isa StridedArray
is_strided(A::PermutedDimsArray) = is_strided(parent(A))

"Why `share` refuses `A`, which `is_strided` does not describe (the StridedViews extension explains a view's `op`)."
not_strided_message(A::AbstractArray) =
    "share needs a strided array (Array, a view with ranges, a PermutedDimsArray of one, a StridedView); " *
    "got $(typeof(A)). Share collect(A) instead."

"""
    share_array(to_python, call, is_type, A, consumer; order, into=nothing)

The shared export path: `to_python(pointer)` wraps a new reference as the extension's object
type; `call(consumer, exporter)` calls the consumer without converting its result (or, when
`consumer` is that type itself, the exporter is returned). With `into` (the borrowed
`PyObject*` of a Python `consumer`) the bridge makes a type's object itself, through its C
exchange API, and an exporter for anything else; `is_type(consumer)` says which it was, asked
only after the bridge's answer (which proves that this thread holds the GIL).
"""
function share_array(to_python, call, is_type, A::AbstractArray, consumer; order::Symbol=:producer,
                     into::Union{Nothing,Ptr{Cvoid}}=nothing)
    readonly = A isa ReadOnlyArray
    B = readonly ? parent(A) : A
    is_strided(B) || throw(DLPackError(:buffer, not_strided_message(B)))
    # Everything that can throw is checked before the array is rooted.
    code = element_code(eltype(B))
    order_code = index_order_code(order)
    dims = collect(Int64, size(B))
    steps = collect(Int64, strides(B))
    device_type, device_id = array_device(B)
    address, stream, flags = array_address(B), producer_stream(B), share_flags(B)
    id = root!(share_root(B))
    shared = GC.@preserve B dims steps consumer begin
        array = ArrayExport(address, pointer(dims), pointer(steps), ndims(B), id,
                            stream, code, order_code, device_type, device_id,
                            readonly ? ACCESS_READ_ONLY : ACCESS_WRITABLE, 0)
        into === nothing ? python_share(array, flags) : python_share_into(array, into, flags)
    end
    object = to_python(shared)
    return consumer isa Type || (into !== nothing && is_type(consumer)) ? object : call(consumer, object)
end
