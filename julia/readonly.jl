"""
    ReadOnlyArray(A)

A view of `A` that refuses writes. `from_dlpack(...; readonly=true)` returns one when the
producer marked the tensor read-only (DLPack's READ_ONLY flag, e.g. a non-writeable NumPy
array), and `share` exports one as read-only.
"""
struct ReadOnlyArray{T,N,A<:AbstractArray{T,N}} <: AbstractArray{T,N}
    parent::A
    # The one constructor (an inner one: no implicit constructors besides it).
    ReadOnlyArray(parent::AbstractArray{T,N}) where {T,N} = new{T,N,typeof(parent)}(parent)
end

Base.parent(R::ReadOnlyArray) = R.parent
Base.size(R::ReadOnlyArray) = size(R.parent)
Base.IndexStyle(::Type{R}) where {T,N,A,R<:ReadOnlyArray{T,N,A}} = IndexStyle(A)
Base.@propagate_inbounds Base.getindex(R::ReadOnlyArray, i::Int...) = R.parent[i...]
Base.@propagate_inbounds Base.getindex(R::ReadOnlyArray, i::Int) = R.parent[i]
Base.setindex!(::ReadOnlyArray, _, ::Int...) = throw(ReadOnlyMemoryError())
Base.strides(R::ReadOnlyArray) = strides(R.parent)
Base.elsize(::Type{R}) where {T,N,A,R<:ReadOnlyArray{T,N,A}} = Base.elsize(A)
Base.unsafe_convert(::Type{Ptr{T}}, R::ReadOnlyArray{T}) where {T} = Base.unsafe_convert(Ptr{T}, R.parent)
