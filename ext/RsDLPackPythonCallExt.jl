# PythonCall's objects for RsDLPack: `getptr` lends the PyObject*, `pynew` takes ownership of
# a new reference; PythonCall's wrapper types unwrap to their `Py`; and `pyconvert` rules that
# take tensors through DLPack (ext/pyconvert_rules.toml names the Python types).
#
# PythonCall names used, traced at v0.9.22 and v0.9.34 (the compat range's ends): Py, getptr,
# pynew, C.PyPtr, pyconvert, pybuiltins, pyisinstance, ispy and the wrapper types
# PyArray, PyDict, PyIO, PyIterable, PyList, PyPandasDataFrame, PySet (each with `ispy` true
# and `Py(x)` its object, at both); pyconvert_add_rule(tname, T, func, priority), whose `func` is
# called as `func(S, x::Py)` with `S` the target intersected with `T` (pyconvert_fix, both),
# pyconvert_return, pyconvert_unconverted and PYCONVERT_PRIORITY_ARRAY / _NORMAL (non-exported
# API at 0.9.22, exported at 0.9.34: qualified here); a rule's answer is type-asserted
# `::pyconvert_returntype(T)` (`Union{T,Unconverted}`) in `pytryconvert`, and rules are tried
# by priority, then in MRO order, until one does not answer `pyconvert_unconverted()` (both
# tags).
# fatou-ignore-file type-piracy: an extension adds methods to RsDLPack's own hooks for its trigger package's types
# fatou-ignore-file non-public-access: an extension is part of RsDLPack and calls the hooks it declares for extensions
module RsDLPackPythonCallExt

using PythonCall: PythonCall, Py, pyconvert, pybuiltins, pyisinstance
using PythonCall: PyArray, PyDict, PyIO, PyIterable, PyList, PyPandasDataFrame, PySet
import RsDLPack

pointer_of(o::Py) = Ptr{Cvoid}(PythonCall.getptr(o))
object_of(p::Ptr{Cvoid}) = PythonCall.pynew(PythonCall.C.PyPtr(p))  # steals the new reference

RsDLPack.from_dlpack(::Type{T}, o::Py; kwargs...) where {T<:AbstractArray} =
    RsDLPack.import_dlpack(pointer_of, T, o; kwargs...)
RsDLPack.from_dlpack(o::Py; kwargs...) = RsDLPack.from_dlpack(Array, o; kwargs...)

# What juliacall passes a Julia function: a NumPy array as a PyArray, other objects as wrappers.
RsDLPack.python_object(x::Union{PyArray,PyDict,PyIO,PyIterable,PyList,PyPandasDataFrame,PySet}) = Py(x)

# The bridge takes every Python consumer: a type gets its object made through its DLPack C
# exchange API (a type without one is refused there, by name: calling the type is not DLPack),
# anything else an exporter to call it with. No Python call comes before the bridge's (which
# refuses off the GIL's thread); `is_type` comes after.
into(consumer::Py) = pointer_of(consumer)
into(::Type{Py}) = nothing
is_type(consumer::Py) = pyisinstance(consumer, pybuiltins.type)

RsDLPack.share(A::AbstractArray, consumer::Union{Py,Type{Py}}; kwargs...) =
    RsDLPack.share_array(object_of, (f, x) -> f(x), is_type, A, consumer; into=into(consumer), kwargs...)

# A stream handle as Python hands it out (`torch.cuda.current_stream().cuda_stream` is a Python
# int, and PythonCall never converts implicitly); the CUDA extension takes the integer.
RsDLPack.unsafe_cuda_stream(handle::Py) = RsDLPack.unsafe_cuda_stream(pyconvert(UInt, handle))

# pyconvert through DLPack, by PythonCall's protocol (src/Convert/pyconvert.jl at v0.9.22 and
# v0.9.34): a rule answers `pyconvert_return(x)` with an `x isa S`, or `pyconvert_unconverted()`,
# and PythonCall tries its next rule. `S` is the target PythonCall asks for, intersected with
# AbstractArray (never a Union): `AbstractArray` itself also for `pyconvert(Any, x)`, which is
# how juliacall converts every argument of a Julia function, so a rule that threw would break
# calls from Python. Which objects are declined is the bridge's decision
# (`RSDLPACK_CALL_DECLINE_REFUSALS`: not a tensor, a class, a tensor whose export its producer
# refuses — torch's `requires_grad`, `nn.Parameter`, conjugate-, negative-bit and sparse
# tensors, sharded JAX arrays — or one the target cannot take, e.g. another device); this only
# maps its answer. Other errors (a bug, no memory for a copy) still throw.
function convert_through_dlpack(::Type{S}, x::Py) where {S}
    A = if S <: Array
        fresh_array(S, x)
    elseif RsDLPack.imports_into(S)  # ReadOnlyArray, CuArray, StridedView: from_dlpack's own forms
        own_form(S, x)
    elseif isabstracttype(Base.unwrap_unionall(S))
        device_view(S, x)
    else
        nothing  # another concrete type (PyArray, ...): not ours
    end
    return A === nothing ? PythonCall.pyconvert_unconverted() : PythonCall.pyconvert_return(A)
end

"`f()`, or `nothing` where the bridge declined the object (a `DLPackError` of kind `:declined`)."
function unless_declined(f)
    try
        return f()
    catch err
        err isa RsDLPack.DLPackError && err.kind === :declined && return nothing
        rethrow()
    end
end

"`from_dlpack(T, x; kwargs...)`, or `nothing` where the bridge declines `x`."
import_or_decline(::Type{T}, x::Py; kwargs...) where {T} =
    unless_declined(() -> RsDLPack.import_dlpack(pointer_of, T, x; decline=true, kwargs...))

"`A` when it is an `S`; else `nothing`, with the tensor behind `A` released now."
function as_target(::Type{S}, A) where {S}
    (A === nothing || A isa S) && return A
    RsDLPack.release_if_imported!(A)
    return nothing
end

"""
`pyconvert(Array…, x)`: always a fresh `Array` with the tensor's indices, made by the copy
engine (`copy=true`), as PythonCall's own `Array` rule always copies (its `pyconvert(Array,
ndarray)`); the rank the target names is asked of the bridge (another rank is declined). Another
element type is converted as PythonCall converts its `PyArray` (`pyconvert_tryconvert`:
`convert`, declined where that throws).
"""
function fresh_array(::Type{S}, x::Py) where {S<:Array}
    rank = RsDLPack.requested_rank(S)
    R = rank == RsDLPack.PLAN_ANY ? Array : Array{<:Any,Int(rank)}
    A = import_or_decline(R, x; copy=true)
    (A === nothing || A isa S) && return A
    return try
        convert(S, A)::S
    catch
        nothing
    end
end

"""
`pyconvert(T, x)` for the types `from_dlpack` makes besides `Array` (`imports_into`): its
result when that is a `T` (a dense `CuArray` for `pyconvert(CuArray, t)`; the untyped forms'
views of other layouts, a `PermutedDimsArray` or `SubArray`, are declined and released at once).
Read-only memory, for a type with no read-only form (a `StridedView`), is copied instead.
"""
function own_form(::Type{S}, x::Py) where {S}
    A = import_or_decline(S, x; readonly=true)
    if A isa RsDLPack.ReadOnlyArray && !(S <: RsDLPack.ReadOnlyArray)
        RsDLPack.release_if_imported!(A)
        A = import_or_decline(S, x; copy=true)
    end
    return as_target(S, A)
end

"""
`pyconvert(AbstractArray, x)`, `pyconvert(Any, x)`: a view of the tensor's memory (any strides;
a `ReadOnlyArray` of one over read-only memory) as the array type of the tensor's device
(`Array`, or `CuArray` with CUDA loaded); declined where the bridge declines the object, where
no array type of its device is loaded, where that type imports from another device (a CUDA
tensor on another GPU than `CUDA.device()`: no producer is asked to copy it across), or where
the view is no `S` (`AbstractVector` of a matrix).
"""
function device_view(::Type{S}, x::Py) where {S}
    device = GC.@preserve x RsDLPack.python_tensor_device(pointer_of(x))
    device === nothing && return nothing
    T = RsDLPack.array_type_for(Val(device[1]))
    T === nothing && return nothing
    wanted = RsDLPack.import_options(T, nothing)
    wanted.has_device == 0 || (wanted.device_type, wanted.device_id) == device || return nothing
    return as_target(S, import_or_decline(T, x; readonly=true))
end

const RULES_FILE = joinpath(@__DIR__, "pyconvert_rules.toml")
include_dependency(RULES_FILE)
const PRIORITIES = Dict("ARRAY" => PythonCall.PYCONVERT_PRIORITY_ARRAY,
                        "NORMAL" => PythonCall.PYCONVERT_PRIORITY_NORMAL)
const RULES = [(String(rule["type"]), PRIORITIES[rule["priority"]])
               for rule in RsDLPack.TOML.parsefile(RULES_FILE)["rule"]]

# Differentiable calls (RsDLPack.PyFunction, torch_layer): the object operations they need.
include("autodiff_pythoncall.jl")

function __init__()
    RsDLPack.load_python_bridge!()
    RsDLPack.pyconvert_rules_enabled() || return
    for (type_name, priority) in RULES
        PythonCall.pyconvert_add_rule(type_name, AbstractArray, convert_through_dlpack, priority)
    end
end

end # module
