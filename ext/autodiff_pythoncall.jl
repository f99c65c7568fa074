# The PythonCall extension's side of differentiable calls (julia/autodiff.jl): the object
# operations RsDLPack.PyFunction and torch_layer need, for `Py`. Included by
# ext/RsDLPackPythonCallExt.jl.
#
# PythonCall names used, traced at v0.9.22 and v0.9.34: pyimport, pyconvert (to Vector{Int},
# Vector{String}, Vector{Py}: its sequence rules), pygetattr, calling a Py with positional and
# keyword arguments (Julia values converted, a `Py` passed as it is, `nothing` as None), and
# pydel! (non-exported API at both, src/Core/Py.jl: decref now; the Py must not be used again).

using PythonCall: pyimport

RsDLPack.autodiff_object(o::Py) = o

function RsDLPack.autodiff_module(::Py)
    path = pyimport("sys").path
    directory = RsDLPack.autodiff_python_dir()
    pyconvert(Int, path.count(directory)) == 0 && path.insert(0, directory)
    return pyimport(RsDLPack.AUTODIFF_MODULE)
end

RsDLPack.python_call(f::Py, args...; kwargs...) = f(args...; kwargs...)
RsDLPack.python_attribute(o::Py, name::String) = PythonCall.pygetattr(o, name)
RsDLPack.python_ints(o::Py) = pyconvert(Vector{Int}, o)
RsDLPack.python_items(o::Py) = pyconvert(Vector{Py}, o)
RsDLPack.python_strings(o::Py) = pyconvert(Vector{String}, o)
RsDLPack.python_release!(o::Py) = PythonCall.pydel!(o)
RsDLPack.python_import_all(o::Py, present, order::Symbol) = RsDLPack.import_dlpack_all(pointer_of, o, present; order)
