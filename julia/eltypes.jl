# The dtype table's Julia side: element codes (rsdlpack::ElementType::code) to Julia types.
# A named code is an index into ELEMENT_TYPES (the order of RsdlElementCode, julia/abi.jl); a
# raw code is RAW_CODE_BASE + DLPack code × 256 + bits (DLPackRaw, below).
#
# bfloat16 is BFloat16s.BFloat16 on every supported Julia (BFloat16s.jl is a dependency, not an
# extension: an extension would make a bfloat16 tensor's element type depend on what the
# session loaded before the import). BFloat16s 0.5-0.6 make it `Core.BFloat16` on Julia ≥ 1.11
# where LLVM can store bfloat (x86_64 with LLVM ≥ 15, aarch64 with LLVM ≥ 19) and their own
# 16-bit primitive type elsewhere, so it is never UInt16 bits.

const BFLOAT16 = BFloat16s.BFloat16

# kDLBcomplex (DLPack code 18, a complex number of two bfloat16) is the named code
# ELEMENT_CODE_BCOMPLEX (rsdlpack::ElementType::ComplexBF16): BFloat16s is a dependency, so it
# is always Complex{BFLOAT16}, never raw pairs (DLPackRaw holds one byte).
const BCOMPLEX = Complex{BFLOAT16}

const ELEMENT_TYPES = (Bool, Int8, Int16, Int32, Int64, UInt8, UInt16, UInt32, UInt64,
                       Float16, BFLOAT16, Float32, Float64, ComplexF32, ComplexF64, BCOMPLEX)

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

# rsdlpack::ElementType::code of raw elements: RAW_CODE_BASE (julia/abi.jl) + DLPack code ×
# 256 + bits.

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
    i = findfirst(S -> S === T, ELEMENT_TYPES)
    i === nothing || return UInt32(i - 1)
    throw(DLPackError(:buffer, "element type $T has no DLPack equivalent; supported: " *
                               join(unique(string.(ELEMENT_TYPES)), ", ")))
end
