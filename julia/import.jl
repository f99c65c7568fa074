# from_dlpack: the generic half. The Python extensions add methods for their object types
# (PyCall.PyObject, PythonCall.Py) that call `import_dlpack` with a way to get the raw pointer;
# the CUDA extension adds `import_options`, `plan_target` and `wrap_imported` methods for
# `CuArray`.

"""
    from_dlpack(Array, obj; copy=nothing, order=:producer, readonly=false)
    from_dlpack(Array{T,N}, obj; copy=nothing, order=:producer, readonly=false)
    from_dlpack(ReadOnlyArray{T,N}, obj; copy=nothing, order=:producer)
    from_dlpack(obj; kwargs...)  # same as from_dlpack(Array, obj; kwargs...)

The tensor `obj` (anything with `__dlpack__`, or a DLPack capsule, as a PyCall `PyObject` or a
PythonCall `Py`) as a Julia array over the same memory.

- Indices match the producer's: a row-major `(2, 3)` tensor `t` arrives as a 2×3 array `A`
  with `A[i, j] == t[i-1, j-1]`. `order=:reversed` reverses the dims instead, so a row-major
  tensor arrives as a plain `Array` of size `(3, 2)`.
- Any strides work: transposed, stepped, reversed (`a[::-1]`) and sliced tensors are views;
  size-1 dimensions may carry any stride; `byte_offset` is honoured.
- `copy=nothing` copies only when no view exists (zero strides, overlapping strides);
  `copy=false` throws a `DLPackError` then; `copy=true` always returns a fresh `Array`.
- A tensor the producer marked read-only throws a `DLPackError` unless `readonly=true`, which
  returns a [`ReadOnlyArray`](@ref), or `copy=true`. A target type that is always writable
  (`Array{T,N}`, `Matrix`, `CuArray{T,N}`) throws for it even with `readonly=true`: ask for
  `ReadOnlyArray{T,N}`, the untyped `Array`, or `copy=true` (on the host).
- Call from the thread that holds Python's GIL (under PyCall and PythonCall, Julia's main
  thread, or after `PythonCall.GIL.lock` on PythonCall 0.9.22 and later): from any other thread
  this throws a `DLPackError` at once instead of waiting for the GIL (a wait that would deadlock
  if the GIL's thread waits for this one).

Result types:
- `from_dlpack(Array, obj)` (untyped) returns what the strides allow without copying: an
  `Array` (column-major in the chosen order), a `SubArray` (stepped, reversed or sliced), a
  `PermutedDimsArray` (any other dimension order), or a `ReadOnlyArray` of one of these.
- `from_dlpack(Array{T,N}, obj)` (typed) always returns exactly `Array{T,N}`, so callers'
  code infers: zero-copy when the tensor is dense in the chosen order (a row-major tensor with
  `order=:reversed`, a column-major one with `order=:producer`), else a copy (`copy=false`
  throws instead). A different element type or rank throws a `DLPackError` naming both.
- `from_dlpack(Matrix, obj)`, `Vector`, `Array{T}` (a rank or an element type named, not both)
  likewise return a plain `Array` (a `Matrix` for `Matrix`), by the same rules, of the
  tensor's element type or rank.
- `from_dlpack(ReadOnlyArray{T,N}, obj)` likewise always returns
  `ReadOnlyArray{T,N,Array{T,N}}`, sharing read-only memory too.
- Element types DLPack has and Julia does not (fp8, fp6, fp4) arrive as
  [`DLPackRaw{code,bits}`](@ref) bytes, which `share` exports with their original type.
- With StridedViews.jl loaded, `from_dlpack(StridedView, obj)` returns a `StridedView` over
  the producer's memory for every layout, zero (broadcast), negative and overlapping strides
  included: its parent is a flat vector over exactly the elements the strides reach. Only
  misaligned data is copied (`copy=nothing`); `copy=true` always copies. Read-only memory (a
  NumPy broadcast) needs `readonly=true` and comes as a `ReadOnlyArray` of the view.
  `from_dlpack(StridedView{T,N}, obj)` always returns a `StridedView{T,N}` (read-only memory
  throws, as for `Array{T,N}`), and `StridedView{T,N,<:CuArray}` (CUDA loaded) a view with a
  `CuArray` parent.

`from_dlpack(A)` and `from_dlpack(T, A)` of a Julia array `A` (what juliacall made of a
tensor argument, through PythonCall's `pyconvert(Any, t)`) return `A` where it is what the
tensor would give (any form for `from_dlpack(A)`, a host array for `Array`), else convert it by
the typed forms' rules (a copy of exactly `Array{T,N}`, `Matrix`, `ReadOnlyArray{T,N}`, …;
`copy=false` refuses), so one function serves NumPy arguments (a `PyArray`, imported from its
object) and torch's, JAX's or CuPy's (already arrays) alike.

The memory stays valid while the result (or any view of it) is reachable; use
[`RsDLPack.unsafe_free!`](@ref) to release it earlier.
"""
function from_dlpack end

"Import options for a target array type (the CUDA extension adds `CuArray`)."
import_options(::Type{<:AbstractArray}, copy) = ImportOptions(; device=(KDLCPU, 0), copy=copy)

"The core's target code for an array type: a host `Array` (the CUDA extension adds `CuArray`)."
plan_target(::Type{<:AbstractArray}) = TARGET_HOST_ARRAY

# The typed forms: a concrete element type and rank, and a plain dense result.
# `eltype` is `Any` both for a type that names no element type (`Array`, `Matrix`) and for
# `Array{Any,N}`: a typed form always asks for its element type, so `Array{Any,N}` throws here
# instead of wrapping the tensor's bytes as an `Array{Any}`.
requested_element(::Type{A}) where {A<:AbstractArray} =
    eltype(A) === Any && !is_typed(A) ? Int64(PLAN_ANY) : Int64(element_code(eltype(A)))
requested_rank(::Type{<:AbstractArray{<:Any,N}}) where {N} = Int64(N)
requested_rank(::Type) = Int64(PLAN_ANY)
is_typed(::Type{Array{T,N}}) where {T,N} = true
is_typed(::Type{<:ReadOnlyArray{T,N}}) where {T,N} = true
is_typed(::Type) = false

# `Matrix`, `Vector`, `Array{T}`: a plain `Array` as well, of the tensor's element type or rank
# (only `Array` itself, naming neither, takes whatever layout the strides allow).
is_plain(::Type{A}) where {A} = is_typed(A) || (A <: Array && A != Array)

# The core refuses read-only views for a result type that cannot be read-only (it is told so);
# the untyped forms and ReadOnlyArray targets wrap them read-only.
writable_type(::Type{A}) where {A} = is_plain(A) && !(A <: ReadOnlyArray)

function plan_options(::Type{A}, copy, order::Symbol, readonly::Bool) where {A}
    return PlanOptions(requested_element(A), requested_rank(A), plan_target(A),
                       index_order_code(order), copy_code(copy),
                       readonly ? ACCESS_READ_ONLY : ACCESS_WRITABLE,
                       is_plain(A) ? DENSE_REQUIRED : DENSE_ANY_LAYOUT, 0)
end

# Every call refuses to wait for the GIL (see `from_dlpack`); `writable`: the result's type has
# no read-only form; `decline`: the bridge answers an object that is not a tensor, or whose
# export is refused, with a `DLPackError` of kind `:declined` (the `pyconvert` rules' way to
# pass it on; the bridge decides which, `RSDLPACK_CALL_DECLINE_REFUSALS`).
import_flags(writable::Bool, decline::Bool=false) =
    UInt32(CALL_REFUSE_WITHOUT_GIL) | (writable ? UInt32(PLAN_WRITABLE_TYPE) : UInt32(0)) |
    (decline ? UInt32(CALL_DECLINE_REFUSALS) : UInt32(0))

"""
    owned_import(make, import_call, pointer_of, obj, options, request, flags) -> (result, plan)

One call into the bridge (`import_call`: `python_import_plan` or `python_import_strided_plan`),
then `make(plan, owner)` builds the result. Nothing holds the tensor if `make` throws: it is
released at once.
"""
function owned_import(make, import_call, pointer_of, obj, options::ImportOptions, request::PlanOptions,
                      flags::UInt32)
    plan = GC.@preserve obj import_call(pointer_of(obj), options, request, flags)
    owner = TensorOwner(plan.tensor)
    result = try
        make(plan, owner)
    catch
        release_now!(owner)  # nothing wraps the tensor: release it now, not at GC
        rethrow()
    end
    return result, plan
end

"The Julia array for a planned import, for a target array type."
wrap_imported(::Type{A}, plan, owner) where {A<:Array} =
    is_plain(A) ? dense_array(element_type(plan.element_code), Val(Int(plan.ndims)), plan, owner) :
    host_array(plan, owner)
wrap_imported(::Type{Array{T,N}}, plan, owner) where {T,N} = dense_array(T, Val(N), plan, owner)
wrap_imported(::Type{<:ReadOnlyArray}, plan, owner) = ReadOnlyArray(host_array(plan, owner))
wrap_imported(::Type{<:ReadOnlyArray{T,N}}, plan, owner) where {T,N} =
    ReadOnlyArray(dense_array(T, Val(N), plan, owner))

"""
    import_dlpack(pointer_of, A, obj; copy, order, readonly, decline=false)

The shared import path: one call into the bridge, then the array is composed here.
`pointer_of(obj)` returns the borrowed `PyObject*` of `obj` (the caller keeps `obj` alive).
`decline=true` (the `pyconvert` rules): what the bridge declines (see `import_flags`) throws a
`DLPackError` of kind `:declined`, for the caller to catch (`declined`).
"""
function import_dlpack(pointer_of, ::Type{A}, obj; copy::Union{Nothing,Bool}=nothing,
                       order::Symbol=:producer, readonly::Bool=false, decline::Bool=false) where {A}
    # Every argument is checked before the tensor exists.
    request = plan_options(A, copy, order, readonly || A <: ReadOnlyArray)
    result, plan = owned_import((plan, owner) -> wrap_imported(A, plan, owner), python_import_plan, pointer_of,
                                obj, import_options(A, copy), request, import_flags(writable_type(A), decline))
    # Plain forms and ReadOnlyArray targets are what was asked for already (wrapping a
    # ReadOnlyArray again would give a result `share` cannot export; the core refused read-only
    # memory for the others); otherwise a view of memory the producer marked read-only stays
    # read-only.
    (is_plain(A) || A <: ReadOnlyArray) && return result
    return readonly && plan.read_only != 0 ? ReadOnlyArray(result) : result
end

"""
    import_dlpack_all(pointer_of, objects, present; order) -> Tuple

`from_dlpack(Array, x; order)` for each item `x` of the Python tuple `objects` where
`present[k]` (`nothing` elsewhere: the item is `None`), in one call into the bridge
(`python_import_plans`). Nothing is held if an import or a wrap fails.
"""
function import_dlpack_all(pointer_of, objects, present::NTuple{N,Bool}; order::Symbol=:producer) where {N}
    request = plan_options(Array, nothing, order, false)
    plans = GC.@preserve objects python_import_plans(pointer_of(objects), present, import_options(Array, nothing),
                                                     request, import_flags(writable_type(Array)))
    owners = ntuple(k -> present[k] ? TensorOwner(plans[k].tensor) : nothing, N)
    try
        return ntuple(k -> present[k] ? wrap_imported(Array, plans[k], owners[k]) : nothing, N)
    catch
        # Nothing escaped: release every tensor now; the wrap's error is the one to report.
        foreach(owners) do owner
            owner === nothing && return
            try
                release_now!(owner)
            catch  # the tensor is released whatever the release reports
            end
        end
        rethrow()
    end
end

"""
The Python object a front-end's wrapper stands for, or `nothing`: the PythonCall extension
unwraps `PyArray`, `PyList`, `PyIterable`, … (how juliacall hands Python arguments to a Julia
function) to the `Py` they wrap.
"""
python_object(_) = nothing

function not_python(x, what)
    return ArgumentError("$what takes a Python object (a PyCall `PyObject`, a PythonCall `Py` or one of " *
                         "its wrappers such as `PyArray`; load the front-end first), got a $(typeof(x))")
end

function from_dlpack(::Type{T}, x; kwargs...) where {T<:AbstractArray}
    o = python_object(x)
    o === nothing && throw(not_python(x, "from_dlpack"))
    return from_dlpack(T, o; kwargs...)
end
from_dlpack(x; kwargs...) = from_dlpack(Array, x; kwargs...)

# A Julia array: what juliacall made of a tensor argument (PythonCall's `pyconvert(Any, t)`, by
# the rules of the PythonCall extension: a view of torch's, JAX's or CuPy's memory), so that
# one function `f(x) = from_dlpack(x)` serves NumPy arguments (a `PyArray`, unwrapped to its
# object above) and those alike. PythonCall's wrappers keep going to their Python object.
function from_dlpack(::Type{T}, x::AbstractArray; kwargs...) where {T<:AbstractArray}
    o = python_object(x)
    o === nothing || return from_dlpack(T, o; kwargs...)
    return already_imported(T, x; kwargs...)
end
from_dlpack(x::AbstractArray; kwargs...) =
    python_object(x) === nothing ? already_imported(Any, x; kwargs...) : from_dlpack(Array, x; kwargs...)

"""
    already_imported(T, x; copy, order, readonly)

`from_dlpack(T, x)` for a Julia array `x` that stands for the tensor (`T === Any`: none named,
`from_dlpack(x)`), by the rules `from_dlpack` follows for the tensor itself:
- `x` when it is what `from_dlpack` gives for `T`: any array for `Any` and `ReadOnlyArray`
  (wrapped), a host array for the untyped `Array`, else an `x isa T`;
- else the typed forms (`Array{T,N}`, `Matrix`, `Vector`, `Array{T}`, `ReadOnlyArray{T,N}`) get
  a copy of `x` of exactly their type, which `copy=false` refuses; another element type or rank
  than they name throws a `DLPackError` naming both; any other type throws (nothing to view);
- `copy=true` always copies; read-only memory (a `ReadOnlyArray`) needs `readonly=true` (a
  type with no read-only form refuses it but for a copy); `x` has the producer's indices
  already, so `order=:reversed` is refused; an array on a device is no host `Array`.
"""
function already_imported(::Type{T}, x::AbstractArray; copy::Union{Nothing,Bool}=nothing,
                          order::Symbol=:producer, readonly::Bool=false) where {T}
    index_order_code(order)  # an unknown order is the ArgumentError it is for a tensor
    order === :producer || throw(ArgumentError(
        "from_dlpack(…; order=:reversed) of a Julia array: it has the producer's indices already (juliacall " *
        "converted the tensor); use PermutedDimsArray(x, ndims(x):-1:1) or permutedims"))
    if x isa ReadOnlyArray && copy !== true && !(T <: ReadOnlyArray) && !(readonly && !writable_type(T))
        throw(DLPackError(:buffer, "this array is read-only (its producer marked the memory so): pass " *
                                   "readonly=true (untyped forms), ask for ReadOnlyArray{T,N}, or copy=true"))
    end
    T === Any || !is_plain(T) || check_typed(T, x)
    device = array_device(x isa ReadOnlyArray ? parent(x) : x)
    (T <: Array || T <: ReadOnlyArray) && device[1] != KDLCPU && throw(DLPackError(:buffer,
        "this $(typeof(x)) is on device $device (DLPack's type and id), not the host; ask for its own " *
        "array type (from_dlpack(CuArray, x)) or copy it to the host yourself"))
    if copy !== true
        (T === Any || T === Array || x isa T) && return x
        T === ReadOnlyArray && return ReadOnlyArray(x)
    end
    copy === false && throw(DLPackError(:buffer, "copy=false, but this $(typeof(x)) is not a $T: it would have to be copied"))
    return copied(T, x)
end

# A fresh array of `T` with `x`'s elements (`already_imported`'s copies).
copied(::Type{Any}, x::AbstractArray) = Base.copy(x)
copied(::Type{T}, x::AbstractArray) where {T<:Array} = (T === Array ? Array(x) : T(x))::Array
copied(::Type{<:ReadOnlyArray}, x::AbstractArray) = ReadOnlyArray(Array(x))
copied(::Type{<:ReadOnlyArray{T,N}}, x::AbstractArray) where {T,N} = ReadOnlyArray(Array{T,N}(x))
copied(::Type{T}, x::AbstractArray) where {T} = throw(DLPackError(:buffer,
    "from_dlpack($T, x) of a $(typeof(x)): a Julia array becomes only itself, an Array or a ReadOnlyArray " *
    "form; convert it (convert($T, x)) or pass the tensor itself"))

"A typed form's element type and rank against `x`'s, as the core checks a tensor's."
function check_typed(::Type{T}, x::AbstractArray) where {T}
    element, rank = requested_element(T), requested_rank(T)
    element == PLAN_ANY || eltype(x) === eltype(T) || throw(DLPackError(:buffer,
        "the tensor's element type is $(eltype(x)), not the requested $(eltype(T))"))
    rank == PLAN_ANY || ndims(x) == rank || throw(DLPackError(:buffer,
        "the tensor has $(ndims(x)) dimensions, not the requested $rank"))
    return nothing
end

# For PythonCall's `pyconvert` rules (ext/RsDLPackPythonCallExt.jl): the array types that
# `from_dlpack` makes besides `Array` (the CUDA extension adds `CuArray`), and the array type
# for a tensor on a DLPack device type when the target names none (CPU: `Array`; the CUDA
# extension adds kDLCUDA).
imports_into(::Type) = false
imports_into(::Type{<:ReadOnlyArray}) = true
array_type_for(::Val{D}) where {D} = D == KDLCPU ? Array : nothing

"""
Whether the PythonCall extension registers its `pyconvert` rules: the preference
`pyconvert_rules` (`Preferences.set_preferences!(RsDLPack, "pyconvert_rules" => false)` turns
them off from the next session on).
"""
pyconvert_rules_enabled() = Preferences.load_preference(@__MODULE__, "pyconvert_rules", true) !== false
