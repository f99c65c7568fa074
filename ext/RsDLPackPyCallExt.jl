# PyCall's objects for RsDLPack: a PyObject is a borrowed PyObject* going in, and a new
# reference coming back is owned by a fresh PyObject. Nothing else lives here.
# fatou-ignore-file type-piracy: an extension adds methods to RsDLPack's own hooks for its trigger package's types
# fatou-ignore-file non-public-access: an extension is part of RsDLPack and calls the hooks it declares for extensions
module RsDLPackPyCallExt

using PyCall: PyCall, PyObject, PyPtr, pybuiltin, pyisinstance
import RsDLPack

pointer_of(o::PyObject) = Ptr{Cvoid}(PyPtr(o))
object_of(p::Ptr{Cvoid}) = PyObject(PyPtr(p))  # steals the new reference
call(f::PyObject, x::PyObject) = PyCall.pycall(f, PyObject, x)  # no conversion of the result

RsDLPack.from_dlpack(::Type{T}, o::PyObject; kwargs...) where {T<:AbstractArray} =
    RsDLPack.import_dlpack(pointer_of, T, o; kwargs...)
RsDLPack.from_dlpack(o::PyObject; kwargs...) = RsDLPack.from_dlpack(Array, o; kwargs...)

# The bridge takes every Python consumer: a type gets its object made through its DLPack C
# exchange API (a type without one is refused there, by name: calling the type is not DLPack),
# anything else an exporter to call it with. No Python call comes before the bridge's (which
# refuses off the GIL's thread); `is_type` comes after.
into(consumer::PyObject) = pointer_of(consumer)
into(::Type{PyObject}) = nothing
is_type(consumer::PyObject) = pyisinstance(consumer, pybuiltin("type"))

RsDLPack.share(A::AbstractArray, consumer::Union{PyObject,Type{PyObject}}; kwargs...) =
    RsDLPack.share_array(object_of, call, is_type, A, consumer; into=into(consumer), kwargs...)

# A stream handle kept as a PyObject (`pycall(f, PyObject, …)`, or a `PyObject` attribute); PyCall's
# own property access converts Python ints to Julia integers already.
RsDLPack.unsafe_cuda_stream(handle::PyObject) = RsDLPack.unsafe_cuda_stream(convert(UInt, handle))

# Differentiable calls (RsDLPack.PyFunction, torch_layer): the object operations they need.
include("autodiff_pycall.jl")

function __init__()
    RsDLPack.load_python_bridge!()
end

end # module
