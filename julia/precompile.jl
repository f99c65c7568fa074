# The wrapping code compiled when the package is precompiled, so that a session's first
# `from_dlpack` does not compile it: arrays composed from synthetic plans, as the core plans a
# column-major parent, a stepped view of it and a permuted one, over Julia's own memory. The
# owners hold no tensor (their release does nothing), and each array's owner entry is taken
# out again, so nothing of the workload stays in the package image: no global either (the
# `@setup_workload` block assigns nothing; test/package.jl checks). No Python, no library call.

"A view plan over the column-major `parent` at `address`: every `step`-th index of parent dim 1, dims reversed if `reversed`."
function synthetic_plan(::Type{T}, address::UInt, parent::Dims{N}; step::Int=1, reversed::Bool=false) where {T,N}
    padded(t) = ntuple(k -> k <= N ? Int64(t[k]) : Int64(0), MAX_NDIM)
    lengths = ntuple(p -> p == 1 ? cld(parent[1], step) : parent[p], N)
    permutation = reversed ? ntuple(k -> N + 1 - k, N) : ntuple(identity, N)
    dims = ntuple(k -> lengths[permutation[k]], N)
    return ArrayPlan(C_NULL, address, Int64(N), padded(dims), padded(parent), padded(ntuple(_ -> 1, N)),
                     padded(ntuple(p -> p == 1 ? step : 1, N)), padded(lengths), padded(permutation),
                     element_code(T), KDLCPU, Int32(0), PLAN_KIND_VIEW, UInt8(0), UInt8(step != 1),
                     UInt8(reversed && N > 1))
end

"Composes every form of import over `buffer` for element type `T` and the parent dims `parent`."
function compose_synthetic(::Type{T}, buffer::Vector{UInt8}, parent::Dims{N}) where {T,N}
    GC.@preserve buffer begin
        address = UInt(pointer(buffer))
        for step in (1, 2), reversed in (false, true)
            plan = synthetic_plan(T, address, parent; step, reversed)
            for A in (wrap_imported(Array, plan, TensorOwner(C_NULL)),
                      wrap_imported(ReadOnlyArray, plan, TensorOwner(C_NULL)))
                release_if_imported!(A)
            end
        end
        dense = synthetic_plan(T, address, parent)
        for A in (wrap_imported(Array{T,N}, dense, TensorOwner(C_NULL)),
                  wrap_imported(ReadOnlyArray{T,N}, dense, TensorOwner(C_NULL)))
            release_if_imported!(A)
        end
    end
    return nothing
end

"""
The whole workload, over a buffer local to this function: PrecompileTools 1.2's
`@setup_workload` (the version Julia 1.10 and 1.11 get; 1.3 needs 1.12) runs its block at top
level without a `let`, so a buffer assigned there would be a global `RsDLPack.buffer` in the image.
"""
function compose_every_synthetic()
    buffer = zeros(UInt8, 16 * 25)  # 25 elements of up to 16 bytes
    for T in (Float32, Float64, Int64, Int32, UInt8, Bool, ComplexF64), parent in ((25,), (4, 6), (4, 3, 2))
        compose_synthetic(T, buffer, parent)
    end
    return nothing
end

@setup_workload begin
    @compile_workload begin
        compose_every_synthetic()
    end
end
