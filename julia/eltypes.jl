# The dtype table's Julia side: element codes (rsdlpack::ElementType::code) to Julia types.
# BFloat16 is `Core.BFloat16` (Julia ≥ 1.11; arithmetic from BFloat16s.jl); on Julia 1.10, which
# has no BFloat16 type, bfloat16 tensors arrive as UInt16 holding the same bits.

const BFLOAT16 = isdefined(Core, :BFloat16) ? getfield(Core, :BFloat16) : UInt16

const ELEMENT_TYPES = (Bool, Int8, Int16, Int32, Int64, UInt8, UInt16, UInt32, UInt64,
                       Float16, BFLOAT16, Float32, Float64, ComplexF32, ComplexF64)

"""
    DLPackRaw{code,bits}

One element of a DLPack type that Julia has no type for — fp8 (`bits == 8`), or fp6/fp4
stored one per byte — as its raw byte, tagged with its DLPack type code (`kDLFloat8_e4m3fn` is
10, for example). Arrays of them come from `from_dlpack` and go back out through `share` with
their original DLPack type; `reinterpret(UInt8, A)` gives the bytes. No arithmetic is defined.
"""
struct DLPackRaw{code,bits}
    byte::UInt8
end

Base.show(io::IO, x::DLPackRaw{C,B}) where {C,B} = print(io, "DLPackRaw{", C, ",", B, "}(0x", string(x.byte; base=16, pad=2), ")")

# rsdlpack::ElementType::code of raw elements: RAW_CODE_BASE + DLPack code × 256 + bits.
const RAW_CODE_BASE = 0x00010000

"Julia element type for an element code from the Rust core."
function element_type(code::Integer)
    if code >= RAW_CODE_BASE
        raw = code - RAW_CODE_BASE
        return DLPackRaw{Int(raw >> 8),Int(raw & 0xff)}
    end
    1 <= code + 1 <= length(ELEMENT_TYPES) ||
        throw(DLPackError(:internal, "unknown element code $code"))
    return ELEMENT_TYPES[code + 1]
end

element_code(::Type{DLPackRaw{C,B}}) where {C,B} = UInt32(RAW_CODE_BASE + C * 256 + B)

"Element code of a Julia element type; a DLPackError names the type when it has none."
function element_code(::Type{T}) where {T}
    # findfirst: on Julia 1.10 UInt16 also stands in for BFloat16, and must export as UInt16.
    i = findfirst(S -> S === T, ELEMENT_TYPES)
    i === nothing || return UInt32(i - 1)
    throw(DLPackError(:buffer, "element type $T has no DLPack equivalent; supported: " *
                               join(unique(string.(ELEMENT_TYPES)), ", ")))
end
