# Declarations the CUDA extension (ext/RsDLPackCUDAExt.jl) implements; the Python extensions
# add methods that convert their integer objects.

"""
    unsafe_cuda_stream(handle) -> CUDA.CuStream

A CUDA.jl `CuStream` for a foreign `CUstream` handle — an integer, or the Python int itself
(a PythonCall `Py` or PyCall `PyObject`), e.g. PyTorch's
`torch.cuda.current_stream().cuda_stream` or CuPy's `stream.ptr` — so that Julia kernels can be
launched on it (`@cuda stream=s ...`) or ordered against it. The stream's context is looked up
through the driver; the object is built without CUDA.jl's constructors, so it does not destroy
the stream when collected (the stream belongs to its producer and must outlive its use).
Default-stream aliases (0, 1, 2) are refused: they have no context of their own.
Needs `using CUDA`.

Unsafe, as CUDA.jl's `unsafe_` functions are: `handle` must be a live `CUstream` of this
process (the driver reads through it to find the context; another integer is undefined
behaviour, not an error), and the stream must outlive the returned object's use.
"""
function unsafe_cuda_stream end

# Without the CUDA extension (or for a handle of another type) there is nothing to build.
unsafe_cuda_stream(handle) = throw(ArgumentError(
    "unsafe_cuda_stream needs `using CUDA` (CUDA.jl 5.4-6) for an integer handle, or PyCall or " *
    "PythonCall for a Python int; got a $(typeof(handle))"))
