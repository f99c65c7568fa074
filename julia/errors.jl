# The package's one exception type. Messages come from the Rust core, unchanged.

"""
    DLPackError(kind, message)

Raised when a tensor cannot be exchanged. `kind` is one of `:invalid` (bad input or options),
`:buffer` (the tensor cannot be exchanged as asked, e.g. `copy=false` but a copy is needed, an
unsupported device, dtype or layout, a read-only tensor where a writable one was asked for),
`:not_dlpack` (the object does not speak DLPack), `:producer` (the Python producer raised),
`:resource` (memory could not be had, e.g. for a copy), `:internal` (a bug in RsDLPack; please
report it). The kind is decided once, in the Rust core, and travels as a number (README's
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
                                       ERROR_CODE_RESOURCE => :resource, ERROR_CODE_INTERNAL => :internal)

error_kind(code::Integer) = get(ERROR_KINDS, Int32(code), :internal)

# The jlrs bridge reports core errors as "[kind] message" (bridges/julia/src/errors.rs);
# jlrs prefixes its exception messages with "Exception: ".
function native_error(message::AbstractString)
    m = match(r"^(?:Exception: )?\[(buffer|invalid|resource|internal)\] (.*)$"s, message)
    return m === nothing ? DLPackError(:invalid, message) : DLPackError(Symbol(m[1]), m[2])
end

# Runs `f`, turning the jlrs bridge's exceptions (JlrsCore.JlrsError) into DLPackError.
function rethrowing_native(f)
    try
        return f()
    catch e
        e isa JlrsCore.JlrsError && throw(native_error(e.msg))
        rethrow()
    end
end
