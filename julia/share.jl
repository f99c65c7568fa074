# share: Julia arrays to Python consumers. The exported tensor roots the array in ROOTS until
# the consumer's deleter runs; the deleter may run on any thread, so it only queues the root id
# (in Rust) and `unroot_released!` — called by every RsDLPack entry point and by
# `flush_releases` — drops the roots here, on a Julia thread.

const ROOTS = Dict{UInt64,Any}()
const ROOTS_LOCK = ReentrantLock()
const NEXT_ROOT = Threads.Atomic{UInt64}(1)

function root!(A)
    id = Threads.atomic_add!(NEXT_ROOT, UInt64(1))
    lock(() -> (ROOTS[id] = A), ROOTS_LOCK)
    return id
end

function unroot_released!()
    while (id = Native.next_released_root()) != 0
        lock(() -> delete!(ROOTS, id), ROOTS_LOCK)
    end
    return nothing
end

"How many Julia arrays are held because a consumer still uses them (for tests and debugging)."
rooted_count() = lock(() -> length(ROOTS), ROOTS_LOCK)

"""
    share(A, consumer; order=:producer)

Hands the array `A` to the Python callable `consumer` (e.g. `torch.from_dlpack`,
`np.from_dlpack`, `jax.dlpack.from_dlpack`) without copying, and returns what it returns.

`A` may be an `Array`, a strided view (`view` with ranges, including negative steps), a
`PermutedDimsArray` of one, or a [`ReadOnlyArray`](@ref) (exported with DLPack's READ_ONLY
flag). With `order=:producer` the consumer sees the same indices (`A[i, j] == t[i-1, j-1]`,
column-major strides); `order=:reversed` hands out the reversed dims (a plain `Matrix` becomes a
row-major-compact tensor of size `reverse(size(A))`).

`A` stays alive until the consumer releases the tensor. Pass the type `PyObject` (PyCall) or
`Py` (PythonCall) as `consumer` to get the exporter object itself, which has `__dlpack__`.
"""
function share end

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

"Whether `share` can describe `A` with one pointer and strides (Base's StridedArray misses PermutedDimsArray)."
is_strided(A::AbstractArray) = A isa StridedArray
is_strided(A::PermutedDimsArray) = is_strided(parent(A))

"""
    share_array(to_python, call, A, consumer; order)

The shared export path: `to_python(pointer)` wraps a new reference as the extension's object
type; `call(consumer, exporter)` calls the consumer without converting its result (or, when
`consumer` is that type itself, the exporter is returned).
"""
function share_array(to_python, call, A::AbstractArray, consumer; order::Symbol=:producer)
    unroot_released!()
    readonly = A isa ReadOnlyArray
    B = readonly ? parent(A) : A
    is_strided(B) || throw(DLPackError(:buffer,
        "share needs a strided array (Array, a view with ranges, a PermutedDimsArray of one); " *
        "got $(typeof(A)). Share collect(A) instead."))
    # Everything that can throw is checked before the array is rooted.
    code = element_code(eltype(B))
    order_code = index_order_code(order)
    dims = collect(Int, size(B))
    steps = collect(Int, strides(B))
    device_type, device_id = array_device(B)
    id = root!(B)
    tensor = GC.@preserve B dims steps rethrowing_native() do
        Native.export_array(array_address(B), code, Int64(ndims(B)), UInt(pointer(dims)),
                            UInt(pointer(steps)), order_code, readonly,
                            UInt32(device_type), Int32(device_id), id)
    end
    exporter = to_python(python_export(Ptr{Cvoid}(tensor), producer_stream(B)))
    return consumer isa Type ? exporter : call(consumer, exporter)
end
