# The package's one exception type. Messages come from the Rust core, unchanged.

"""
    DLPackError(kind, message)

Raised when a tensor cannot be exchanged. `kind` is one of `:invalid` (bad input or options),
`:buffer` (the tensor cannot be exchanged as asked, e.g. `copy=false` but a copy is needed, an
unsupported device, dtype or layout, a read-only tensor where a writable one was asked for),
`:not_dlpack` (the object does not speak DLPack), `:producer` (the Python producer raised),
`:resource` (memory could not be had, e.g. for a copy), `:driver` (a CUDA driver call failed
other than for memory; the call and its status are in the message), `:interpreter` (the Python
interpreter is not running), `:internal` (a bug in RsDLPack; please report it). `:declined`
is internal to the `pyconvert` rules (the bridge's answer to a call that asked to have an
object that is not a tensor, or whose export its producer refuses, declined), never thrown to
users. The kind is decided once, in the Rust core, and travels as a number (README's
error-code table); the message is for people.
"""
struct DLPackError <: Exception
    kind::Symbol
    message::String
end

Base.showerror(io::IO, e::DLPackError) = print(io, "DLPackError (", e.kind, "): ", e.message)

# The Python bridge's return codes (RsdlErrorCode, julia/abi.jl); each kind is its code's name.
const ERROR_KINDS = Dict{Int32,Symbol}(ERROR_CODE_INVALID => :invalid, ERROR_CODE_BUFFER => :buffer,
                                       ERROR_CODE_NOT_DLPACK => :not_dlpack, ERROR_CODE_PRODUCER => :producer,
                                       ERROR_CODE_RESOURCE => :resource, ERROR_CODE_DRIVER => :driver,
                                       ERROR_CODE_INTERPRETER => :interpreter, ERROR_CODE_DECLINED => :declined,
                                       ERROR_CODE_INTERNAL => :internal)

error_kind(code::Integer) = get(ERROR_KINDS, Int32(code), :internal)

# Every DLPackError of either bridge is built here: from an RsdlErrorCode, mapped to its kind,
# and the core's message (nothing is parsed out of the text). The Python bridge's return codes
# come through `bridge_error` (python_bridge.jl); the jlrs bridge calls this function itself and throws
# what it returns (bridges/julia/src/errors.rs).
native_error(code::Integer, message::AbstractString) = DLPackError(error_kind(code), message)
