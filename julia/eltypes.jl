# The dtype table's Julia side: element codes (rsdlpack::ElementType::code) to Julia types.
# BFloat16 is `Core.BFloat16` (Julia ≥ 1.11; arithmetic from BFloat16s.jl); on Julia 1.10, which
# has no BFloat16 type, bfloat16 tensors arrive as UInt16 holding the same bits.

const BFLOAT16 = isdefined(Core, :BFloat16) ? getfield(Core, :BFloat16) : UInt16

const ELEMENT_TYPES = (Bool, Int8, Int16, Int32, Int64, UInt8, UInt16, UInt32, UInt64,
                       Float16, BFLOAT16, Float32, Float64, ComplexF32, ComplexF64)

"Julia element type for an element code from the Rust core."
function element_type(code::Integer)
    1 <= code + 1 <= length(ELEMENT_TYPES) ||
        throw(DLPackError(:internal, "unknown element code $code"))
    return ELEMENT_TYPES[code + 1]
end

"Element code of a Julia element type; a DLPackError names the type when it has none."
function element_code(::Type{T}) where {T}
    # findfirst: on Julia 1.10 UInt16 also stands in for BFloat16, and must export as UInt16.
    i = findfirst(S -> S === T, ELEMENT_TYPES)
    i === nothing || return UInt32(i - 1)
    throw(DLPackError(:buffer, "element type $T has no DLPack equivalent; supported: " *
                               join(unique(string.(ELEMENT_TYPES)), ", ")))
end
