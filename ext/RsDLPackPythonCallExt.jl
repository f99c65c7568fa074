# PythonCall's objects for RsDLPack: `getptr` lends the PyObject*, `pynew` takes ownership of
# a new reference. Nothing else lives here.
# fatou-ignore-file type-piracy: an extension adds methods to RsDLPack's own hooks for its trigger package's types
# fatou-ignore-file non-public-access: an extension is part of RsDLPack and calls the hooks it declares for extensions
module RsDLPackPythonCallExt

using PythonCall: PythonCall, Py, pyconvert, pybuiltins, pyisinstance
import RsDLPack

pointer_of(o::Py) = Ptr{Cvoid}(PythonCall.getptr(o))
object_of(p::Ptr{Cvoid}) = PythonCall.pynew(PythonCall.C.PyPtr(p))  # steals the new reference

RsDLPack.from_dlpack(::Type{T}, o::Py; kwargs...) where {T<:AbstractArray} =
    RsDLPack.import_dlpack(pointer_of, T, o; kwargs...)
RsDLPack.from_dlpack(o::Py; kwargs...) = RsDLPack.from_dlpack(Array, o; kwargs...)

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

function __init__()
    RsDLPack.load_python_bridge!()
end

end # module
