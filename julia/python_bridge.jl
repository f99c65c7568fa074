# The Python bridge's C entry points (bridges/python/src/entry.rs), over raw PyObject pointers.
# Both Python extensions (PyCall, PythonCall) go through these few functions, so the protocol
# lives in one place; the extensions only convert their object types to and from pointers.
# Must be called on the thread that may call Python (PyCall/PythonCall: the main thread).

"Mirror of `RsdlImportOptions`: `has_*` say whether the next field carries a request."
struct ImportOptions
    has_stream::Int32
    stream::Int64
    has_device::Int32
    device_type::UInt32
    device_id::Int32
    copy::Int32
end

const KDLCPU = UInt32(1)
const KDLCUDA = UInt32(2)  # also the CUDA extension's device type

function ImportOptions(; stream::Union{Nothing,Integer}=nothing,
                       device::Union{Nothing,Tuple{Integer,Integer}}=nothing,
                       copy::Union{Nothing,Bool}=nothing)
    ImportOptions(stream === nothing ? 0 : 1, stream === nothing ? 0 : Int64(stream),
                  device === nothing ? 0 : 1,
                  device === nothing ? UInt32(0) : UInt32(device[1]),
                  device === nothing ? Int32(0) : Int32(device[2]),
                  copy === nothing ? -1 : Int32(copy))
end

const PYTHON_BRIDGE = Ref{Ptr{Cvoid}}(C_NULL)
const PYTHON_SYMBOLS = Dict{Symbol,Ptr{Cvoid}}()
const PYTHON_SYMBOLS_LOCK = ReentrantLock()

"Loads the Python bridge (called by the Python extensions' `__init__`)."
function load_python_bridge!()
    lock(PYTHON_SYMBOLS_LOCK) do
        if PYTHON_BRIDGE[] == C_NULL
            PYTHON_BRIDGE[] = Libdl.dlopen(python_library_path())
        end
    end
    return nothing
end

function python_symbol(name::Symbol)
    lock(PYTHON_SYMBOLS_LOCK) do
        PYTHON_BRIDGE[] == C_NULL && throw(DLPackError(:invalid,
            "the Python bridge is not loaded; `using PyCall` or `using PythonCall` first"))
        get!(() -> Libdl.dlsym(PYTHON_BRIDGE[], name), PYTHON_SYMBOLS, name)
    end
end

function bridge_error(code::Integer, message::Ptr{UInt8})
    text = message == C_NULL ? "(no message)" : unsafe_string(message)
    message == C_NULL || ccall(python_symbol(:rsdlpack_error_free), Cvoid, (Ptr{UInt8},), message)
    return DLPackError(error_kind(code), text)
end

"""
    python_import(object_pointer, options) -> Ptr{Cvoid}

`__dlpack__` negotiation on a borrowed `PyObject*`; returns an owned `DLManagedTensorVersioned*`.
"""
function python_import(object::Ptr{Cvoid}, options::ImportOptions)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    message = Ref{Ptr{UInt8}}(C_NULL)
    code = ccall(python_symbol(:rsdlpack_py_import), Int32,
                 (Ptr{Cvoid}, Ref{ImportOptions}, Ref{Ptr{Cvoid}}, Ref{Ptr{UInt8}}),
                 object, options, out, message)
    code == 0 || throw(bridge_error(code, message[]))
    return out[]
end

"""
    python_export(tensor, stream=0) -> Ptr{Cvoid}

Hands an owned `DLManagedTensorVersioned*` to the Python bridge (always: even on error) and
returns a new reference to a Python object with `__dlpack__`. For device memory, `stream` is
the CUDA stream its writes were enqueued on; consumers' streams are ordered after it.
"""
function python_export(tensor::Ptr{Cvoid}, stream::UInt=UInt(0))
    out = Ref{Ptr{Cvoid}}(C_NULL)
    message = Ref{Ptr{UInt8}}(C_NULL)
    code = ccall(python_symbol(:rsdlpack_py_export_with_stream), Int32,
                 (Ptr{Cvoid}, Csize_t, Ref{Ptr{Cvoid}}, Ref{Ptr{UInt8}}), tensor, stream, out, message)
    code == 0 || throw(bridge_error(code, message[]))
    return out[]
end

"""
    flush_releases() -> Int

Runs the deleters of Python-produced tensors whose release happened on a thread without the
GIL (a finalizer on another thread), and unroots Julia arrays whose exported tensors were
released. Call it from the thread that runs Python. Returns how many Python releases ran.
"""
function flush_releases()
    unroot_released!()
    PYTHON_BRIDGE[] == C_NULL && return 0
    return Int(ccall(python_symbol(:rsdlpack_py_flush_releases), Csize_t, ()))
end

"How many Python-produced tensors wait for `flush_releases` (released off the GIL)."
pending_releases() =
    PYTHON_BRIDGE[] == C_NULL ? 0 : Int(ccall(python_symbol(:rsdlpack_py_pending_releases), Csize_t, ()))
