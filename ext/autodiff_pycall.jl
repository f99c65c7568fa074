# The PyCall extension's side of differentiable calls (julia/autodiff.jl): the object
# operations RsDLPack.PyFunction and torch_layer need, for `PyObject`. Included by
# ext/RsDLPackPyCallExt.jl.
#
# PyCall names used, traced at v1.96.0 and v1.96.4: pyimport, pycall(f, PyObject, args...;
# kwargs...) (no conversion of the result; `nothing` passed as None), getproperty(o, ::String)
# (the attribute unconverted; a Symbol would convert it), get(o, PyObject, k) (item k,
# 0-based), length(o), convert(Vector{T}, o), pydecref (decref now and null the PyObject).

RsDLPack.autodiff_object(o::PyObject) = o

function RsDLPack.autodiff_module(::PyObject)
    path = getproperty(PyCall.pyimport("sys"), "path")
    directory = RsDLPack.autodiff_python_dir()
    if PyCall.pycall(getproperty(path, "count"), Int, directory) == 0
        PyCall.pycall(getproperty(path, "insert"), PyObject, 0, directory)
    end
    return PyCall.pyimport(RsDLPack.AUTODIFF_MODULE)
end

RsDLPack.python_call(f::PyObject, args...; kwargs...) = PyCall.pycall(f, PyObject, args...; kwargs...)
RsDLPack.python_attribute(o::PyObject, name::String) = getproperty(o, name)
# Element by element: `convert(Vector{Int}, o)` first tries the buffer protocol, which a tuple
# refuses with a Python exception on every call.
RsDLPack.python_ints(o::PyObject) = Int[get(o, Int, k) for k in 0:length(o)-1]
RsDLPack.python_items(o::PyObject) = PyObject[get(o, PyObject, k) for k in 0:length(o)-1]
RsDLPack.python_strings(o::PyObject) = convert(Vector{String}, o)
RsDLPack.python_release!(o::PyObject) = PyCall.pydecref(o)
RsDLPack.python_import_all(o::PyObject, present, order::Symbol) = RsDLPack.import_dlpack_all(pointer_of, o, present; order)
