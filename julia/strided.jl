# Strided imports, for a strided array type that holds a flat parent, sizes, strides and an
# offset (the StridedViews extension: `from_dlpack(StridedView, t)`). Any layout DLPack allows —
# zero, negative, permuted, stepped, overlapping or non-nesting strides — is one flat span over
# the elements the strides reach, the offset of the tensor's first element in it and the
# strides: the core plans it (src/layout/strided.rs; `rsdlpack_py_import_strided_plan`) and this
# file makes the parent, owned by the tensor's handle as the composed views' parents are
# (`wrap_foreign`, julia/arrays.jl). The CUDA extension adds CuArray parents.

"""
The flat parent over a view plan's span, of the array kind `P`: a host `Vector{T}` (the CUDA
extension adds `CuArray`), whose storage releases `owner` when collected.
"""
span_parent(::Type{<:AbstractArray}, ::Type{T}, plan::StridedPlan, owner::TensorOwner) where {T} =
    wrap_foreign(T, plan.span_address, (Int(plan.span_len),), owner)

"A fresh flat parent of `n` elements of the array kind `P`, for an empty or copied result (the CUDA extension adds `CuArray`)."
fresh_parent(::Type{<:AbstractArray}, ::Type{T}, n::Int) where {T} = Vector{T}(undef, n)

"""
    strided_parts(P, T, Val(N), plan, owner) -> (parent, dims, strides, offset)

What a strided array is made of for `plan`, with element type `T` and rank `N` (the plan's:
the core checked them against a typed request): a parent over the span for a view; otherwise
a fresh flat parent, into which a copy is made now (releasing the tensor), described
column-major by the plan. `offset` is 0-based.
"""
function strided_parts(::Type{P}, ::Type{T}, ::Val{N}, plan::StridedPlan, owner::TensorOwner) where {P,T,N}
    dims = ntuple(k -> Int(plan.dims[k]), Val(N))
    steps = ntuple(k -> Int(plan.strides[k]), Val(N))
    plan.kind == PLAN_KIND_VIEW && return span_parent(P, T, plan, owner), dims, steps, Int(plan.offset)
    A = fresh_parent(P, T, Int(plan.span_len))
    plan.kind == PLAN_KIND_COPY && copy_into!(A, take_handle!(owner))
    return A, dims, steps, 0
end

"""
The strided plan request: element code and rank (`PLAN_ANY` for any), the target of the parent
kind `P`, and `from_dlpack`'s keywords. Every argument is checked before the tensor exists.
"""
function strided_request(::Type{P}, element::Int64, rank::Int64; copy::Union{Nothing,Bool}, order::Symbol,
                         readonly::Bool) where {P}
    return PlanOptions(element, rank, plan_target(P), index_order_code(order), copy_code(copy),
                       readonly ? ACCESS_READ_ONLY : ACCESS_WRITABLE, DENSE_ANY_LAYOUT, 0)
end

"""
    import_strided(make, pointer_of, P, obj, request, writable_type; copy, decline=false) -> (result, read_only)

The strided import: one call into the bridge, then `make(plan, owner)` builds the result (from
`strided_parts`); `read_only` says whether it shares memory the producer marked read-only.
`writable_type`: the result has no read-only form (read-only memory is refused unless copied);
`decline`: as for `import_dlpack`. The bridge call and the tensor's ownership are
`owned_import`'s.
"""
function import_strided(make, pointer_of, ::Type{P}, obj, request::PlanOptions, writable_type::Bool;
                        copy::Union{Nothing,Bool}, decline::Bool=false) where {P}
    result, plan = owned_import(make, python_import_strided_plan, pointer_of, obj, import_options(P, copy),
                                request, import_flags(writable_type, decline))
    return result, plan.read_only != 0
end
