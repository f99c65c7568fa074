# from_dlpack: the generic half. The Python extensions add methods for their object types
# (PyCall.PyObject, PythonCall.Py) that call `import_dlpack` with a way to get the raw pointer;
# the CUDA extension adds `import_options` and `wrap_imported` methods for `CuArray`.

"""
    from_dlpack(Array, obj; copy=nothing, order=:producer, readonly=false)
    from_dlpack(obj; kwargs...)  # same as from_dlpack(Array, obj; kwargs...)

The tensor `obj` (anything with `__dlpack__`, or a DLPack capsule, as a PyCall `PyObject` or a
PythonCall `Py`) as a Julia array over the same memory.

- Indices match the producer's: a row-major `(2, 3)` tensor `t` arrives as a 2×3 array `A`
  with `A[i, j] == t[i-1, j-1]` (a `PermutedDimsArray` when the layout is row-major; a plain
  `Array` for column-major data). `order=:reversed` reverses the dims instead, so a row-major
  tensor arrives as a plain `Array` of size `(3, 2)`.
- Any strides work: transposed, stepped, reversed (`a[::-1]`) and sliced tensors are views;
  size-1 dimensions may carry any stride; `byte_offset` is honoured.
- `copy=nothing` copies only when no view exists (zero strides, overlapping strides);
  `copy=false` throws a `DLPackError` then; `copy=true` always returns a fresh `Array`.
- A tensor the producer marked read-only throws a `DLPackError` unless `readonly=true`, which
  returns a [`ReadOnlyArray`](@ref), or `copy=true`.

The memory stays valid while the result (or any view of it) is reachable; use
[`RsDLPack.unsafe_free!`](@ref) to release it earlier.
"""
function from_dlpack end

"Import options for a target array type (the CUDA extension adds `CuArray`)."
import_options(::Type{<:Array}, copy) = ImportOptions(; device=(KDLCPU, 0), copy=copy)

"The Julia array for a planned import, for a target array type."
wrap_imported(::Type{<:Array}, handle) = host_array(handle)

"""
    import_dlpack(pointer_of, T, obj; copy, order, readonly)

The shared import path. `pointer_of(obj)` returns the borrowed `PyObject*` of `obj` (the
caller keeps `obj` alive during the call).
"""
function import_dlpack(pointer_of, ::Type{T}, obj; copy::Union{Nothing,Bool}=nothing,
                       order::Symbol=:producer, readonly::Bool=false) where {T}
    unroot_released!()
    # Every argument is checked before the tensor exists: after python_import it is owned
    # here, and only take_tensor (which releases it on any error) may receive it.
    order_code = index_order_code(order)
    options = import_options(T, copy)
    tensor = GC.@preserve obj python_import(pointer_of(obj), options)
    handle = rethrowing_native(() -> Native.take_tensor(UInt(tensor), order_code, copy_code(copy), readonly))
    A = try
        wrap_imported(T, handle)
    catch
        Native.release!(handle)  # nothing wraps the tensor: release it now, not at GC
        rethrow()
    end
    # A view of memory the producer marked read-only stays read-only; copies are the caller's.
    shares_read_only = Native.plan_kind(handle) == PLAN_VIEW && Native.is_read_only(handle)
    return readonly && shares_read_only ? ReadOnlyArray(A) : A
end
