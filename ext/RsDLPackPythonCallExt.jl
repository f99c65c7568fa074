# PythonCall's objects for RsDLPack: `getptr` lends the PyObject*, `pynew` takes ownership of
# a new reference; PythonCall's wrapper types unwrap to their `Py`; and `pyconvert` rules that
# take tensors through DLPack (ext/pyconvert_rules.toml names the Python types).
#
# PythonCall names used, traced at v0.9.22 and v0.9.34 (the compat range's ends): Py, getptr,
# pynew, C.PyPtr, pyconvert, pybuiltins, pyisinstance, pyhasattr, ispy and the wrapper types
# PyArray, PyDict, PyIO, PyIterable, PyList, PyPandasDataFrame, PySet (each with `ispy` true
# and `Py(x)` its object, at both); pyconvert_add_rule(tname, T, func, priority), whose `func` is
# called as `func(S, x::Py)` with `S` the target intersected with `T` (pyconvert_fix, both),
# pyconvert_return, pyconvert_unconverted and PYCONVERT_PRIORITY_ARRAY / _NORMAL (non-exported
# API at 0.9.22, exported at 0.9.34: qualified here).
# fatou-ignore-file type-piracy: an extension adds methods to RsDLPack's own hooks for its trigger package's types
# fatou-ignore-file non-public-access: an extension is part of RsDLPack and calls the hooks it declares for extensions
module RsDLPackPythonCallExt

using PythonCall: PythonCall, Py, pyconvert, pybuiltins, pyisinstance, pyhasattr
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

# pyconvert through DLPack. `S` is the target PythonCall asks for, intersected with
# AbstractArray (never a Union): `AbstractArray` itself also for `pyconvert(Any, x)`, which is
# how juliacall converts a Julia function's arguments.
function convert_through_dlpack(::Type{S}, x::Py) where {S}
    pyhasattr(x, "__dlpack__") || return PythonCall.pyconvert_unconverted()
    if S <: Array
        A = plain_array(S, x)
        return A === nothing ? PythonCall.pyconvert_unconverted() : PythonCall.pyconvert_return(A)
    elseif RsDLPack.imports_into(S)  # ReadOnlyArray, CuArray: from_dlpack's own forms
        return PythonCall.pyconvert_return(RsDLPack.from_dlpack(S, x))
    elseif isabstracttype(Base.unwrap_unionall(S))
        # Any view of the tensor's memory, on its own device; read-only memory stays read-only.
        T = device_array_type(x)
        T === nothing && return PythonCall.pyconvert_unconverted()
        A = RsDLPack.from_dlpack(T, x; readonly=true)
        A isa S && return PythonCall.pyconvert_return(A)
        RsDLPack.release_if_imported!(A)
    end
    return PythonCall.pyconvert_unconverted()  # another concrete type (PyArray, ...): not ours
end

# A writable `Array` with the tensor's indices, as PythonCall's `pyconvert(Array, ndarray)`
# gives: the tensor's memory when it is dense column-major and writable, else a copy (the view
# released at once), converted as PythonCall converts its PyArray (`pyconvert_tryconvert`:
# `convert`, and `nothing` where that throws: another rank).
function plain_array(::Type{S}, x::Py) where {S<:Array}
    A = RsDLPack.from_dlpack(Array, x; readonly=true)
    A isa S && return A
    B = try
        convert(S, A)::S
    catch
        nothing
    end
    RsDLPack.release_if_imported!(A)
    return B
end

function device_array_type(x::Py)
    pyhasattr(x, "__dlpack_device__") || return Array
    device_type = pyconvert(Int, x.__dlpack_device__()[0])
    return RsDLPack.array_type_for(Val(UInt32(device_type)))
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
