# Reactant.jl for RsDLPack: `share(x, consumer)` hands a Reactant array's XLA buffer to the
# consumer zero-copy, on the CPU and on CUDA GPUs, with the array (and the buffers it holds)
# rooted until the consumer lets go. Only methods of hooks the package declares (julia/share.jl).
# Reactant has no DLPack API of its own (issue #1362 open; PR #1988, which would add one, and
# PR #2658, which would add a buffer-ready wait, unmerged), so none of the names below is public.
# [compat] admits every 0.2 release from 0.2.226 (a weak dependency's bound binds every
# environment that has RsDLPack, and Reactant tags a 0.2.x every few days): the names below that
# Reactant does not export are listed once, in NON_PUBLIC_NAMES, and `__init__` checks that each
# exists. Where one is missing the extension warns once, naming them, and `share` of a Reactant
# array throws a DLPackError saying so; loading never fails for a renamed name.
#
# Every Reactant name used here, traced in every tag from v0.2.226 to v0.2.280 (each tag checked
# for each definition quoted here; later tags are guarded by the check above):
#   ConcretePJRTArray{T,N,D} (src/Types.jl, exported): a mutable struct with fields
#   `data::NTuple{D,XLA.PJRT.AsyncBuffer}` (one buffer per addressable shard),
#   `sharding::Sharding.ShardInfo` and `donated::Bool`; `x.data` throws once donated. A
#   DenseArray (`RArray{T,N} <: DenseArray{T,N}`, `AbstractConcreteArray{T,N} <: RArray{T,N}`),
#   with `Base.strides(x::AbstractConcreteArray) = Base.size_to_strides(1, size(x)...)`
#   (src/ConcreteRArray.jl): column-major dense, which is how its buffer lies: XLA's shape is
#   Julia's dims reversed (`sizear = collect(Int64, reverse(size(array)))` in
#   src/xla/PJRT/Buffer.jl) in XLA's default major-to-minor layout, and Reactant's own CPU
#   `getindex` reads the buffer column-major (`start *= size(a, N - i + 1)`).
#   ConcreteRArray (src/Types.jl, exported): ConcretePJRTArray under the default xla_runtime
#   preference "PJRT" (src/xla/XLA.jl), ConcreteIFRTArray under "IFRT".
#   ConcreteIFRTArray (src/Types.jl, exported): its buffer has no pointer
#   (`XLA.unsafe_buffer_pointer(::IFRT.Array)` throws, src/xla/IFRT/Array.jl): refused.
#   Sharding.is_sharded(::ShardInfo) (src/Sharding.jl; `is_sharded(::NoSharding) = false`).
#   XLA.synced_buffer(::AbstractAsyncBuffer), Base.isempty(::AbstractAsyncBuffer) (a null
#   buffer handle), Base.size, XLA.client and XLA.device of an AbstractAsyncBuffer (the
#   `for op in (:(Base.ndims), :(Base.size), …, :device, :client, :sharding)` loop), all in
#   src/xla/Buffer.jl; Base.size(::PJRT.Buffer) is XLA's shape (src/xla/PJRT/Buffer.jl).
#   XLA.unsafe_buffer_pointer(::PJRT.Buffer) (src/xla/PJRT/Buffer.jl; PjRtClient's
#   UnsafeBufferPointer in deps/ReactantExtra/API.cpp), XLA.platform_name(::PJRT.Client)
#   (src/xla/PJRT/Client.jl; Reactant itself compares it with "cpu", src/compiler/Compiler.jl,
#   and "cuda", src/xla/Device.jl), XLA.get_local_hardware_id(::PJRT.Device) (the CUDA
#   ordinal, src/xla/PJRT/Device.jl).
#   Base.copyto!(dest::Array{T}, doffs::Int64, src::ConcretePJRTArray{T}, soffs::Int64,
#   n::Int64) (src/ConcreteRArray.jl, from v0.2.226): waits for the buffer's future, then
#   CopyFromBuffer, which awaits PjRtBuffer::CopyRawToHost (deps/ReactantExtra/API.cpp).
# Why that copy is the wait (XLA's xla/pjrt/common_pjrt_client.cc, read in tensorflow/tensorflow's
# third_party/xla): an upload's buffer is defined by an event set later on a worker thread
# (BufferFromHostBuffer), UnsafeBufferPointer waits for nothing (AcquireExternalReference), and
# CopyRawToHostFuture starts its copy only once the buffer's definition events are ready.
# fatou-ignore-file type-piracy: an extension adds methods to RsDLPack's own hooks for its trigger package's types
module RsDLPackReactantExt

using Reactant: Reactant, ConcreteIFRTArray, ConcretePJRTArray
using RsDLPack: RsDLPack, DLPackError, KDLCPU, KDLCUDA

# Every name below Reactant that this extension uses and Reactant does not export, as the path
# from the Reactant module (traced in v0.2.226-v0.2.280, header above), and the fields of
# ConcretePJRTArray it reads. Exported names (ConcretePJRTArray, ConcreteIFRTArray) are Reactant's
# public API and are imported above.
const NON_PUBLIC_NAMES = (
    (:XLA,), (:XLA, :client), (:XLA, :device), (:XLA, :platform_name),
    (:XLA, :get_local_hardware_id), (:XLA, :synced_buffer), (:XLA, :unsafe_buffer_pointer),
    (:Sharding,), (:Sharding, :is_sharded),
)
const CONCRETE_PJRT_FIELDS = (:data, :sharding, :donated)

"The names of NON_PUBLIC_NAMES and CONCRETE_PJRT_FIELDS that `reactant` (a module) lacks."
function missing_names(reactant::Module, array_type::Type)
    absent = String[]
    for path in NON_PUBLIC_NAMES
        owner = reactant
        for name in path
            owner = owner isa Module && isdefined(owner, name) ? getfield(owner, name) : nothing
        end
        owner === nothing && push!(absent, join((nameof(reactant), path...), "."))
    end
    for field in CONCRETE_PJRT_FIELDS
        field in fieldnames(array_type) || push!(absent, "$(nameof(array_type)).$field (a field)")
    end
    return absent
end

# What `__init__` found missing in the Reactant this session loaded; empty where all is there.
const MISSING = String[]

function __init__()
    append!(empty!(MISSING), missing_names(Reactant, ConcretePJRTArray))
    isempty(MISSING) || @warn "RsDLPack: this Reactant ($(pkgversion(Reactant))) lacks " *
        "$(join(MISSING, ", ")), which RsDLPack's Reactant extension uses (traced in Reactant " *
        "0.2.226-0.2.280): `share` of a Reactant array will throw. Everything else works; " *
        "share Array(x), a copy, meanwhile, and update RsDLPack or pin Reactant to a release that has them."
end

"A `DLPackError` naming what this Reactant lacks, where `__init__` found anything missing."
function check_names()
    isempty(MISSING) && return nothing
    throw(DLPackError(:buffer,
        "RsDLPack cannot share Reactant arrays with this Reactant ($(pkgversion(Reactant))): it " *
        "lacks $(join(MISSING, ", ")), which RsDLPack's Reactant extension uses (traced in " *
        "Reactant 0.2.226-0.2.280). Share Array(x), a copy, instead; update RsDLPack, or pin " *
        "Reactant to a release that has them."))
end

"Reactant's XLA module, once `check_names` has found it there."
xla() = getfield(Reactant, :XLA)

"""
The one buffer that holds all of `x`, or a `DLPackError` saying why there is none: DLPack
describes one device's memory, so sharded and donated arrays are refused.
"""
function whole_buffer(x::ConcretePJRTArray)
    check_names()
    x.donated && throw(DLPackError(:buffer,
        "this $(typeof(x)) was donated to a compiled function, which took its buffer: share " *
        "that function's result instead (or compile it without donating x)."))
    buffers = x.data
    if getfield(Reactant, :Sharding).is_sharded(x.sharding) || length(buffers) != 1
        throw(DLPackError(:buffer,
            "this $(typeof(x)) is sharded ($(length(buffers)) addressable buffer(s)): DLPack " *
            "describes one device's memory. Share an unsharded array (e.g. " *
            "ConcreteRArray(Array(x)), a copy gathered through the host)."))
    end
    buffer = only(buffers)
    isempty(buffer) && throw(DLPackError(:buffer,
        "this $(typeof(x)) has no XLA buffer (a null handle): make it anew from its data."))
    # Reactant's XLA shape is Julia's dims reversed; any other shape is not this array's buffer.
    size(buffer) == reverse(size(x)) || throw(DLPackError(:buffer,
        "this $(typeof(x)) of size $(size(x)) holds a buffer of XLA shape $(size(buffer)), " *
        "not its reversed dims: it is not one dense column-major buffer. Share Array(x), a copy."))
    return buffer
end

# CPU and CUDA buffers only: the device the core then checks the memory against.
function RsDLPack.array_device(x::ConcretePJRTArray)
    buffer = whole_buffer(x)
    XLA = xla()
    platform = XLA.platform_name(XLA.client(buffer))
    platform == "cpu" && return (KDLCPU, Int32(0))
    platform == "cuda" && return (KDLCUDA, Int32(XLA.get_local_hardware_id(XLA.device(buffer))))
    throw(DLPackError(:buffer,
        "a Reactant array on the $(repr(platform)) platform: RsDLPack shares Reactant's CPU and " *
        "CUDA buffers. Share Array(x) (a copy on the host) instead."))
end

"""
The address of `x`'s buffer once every write Reactant enqueued on it has finished: the
computation that made it (`XLA.synced_buffer` waits for its future), and any other pending
write (an upload from the host, a copy), which a one-element `copyto!` to the host waits for:
XLA reads the buffer only after each of its definition events. A host wait, since the streams
XLA computes on are not reachable from Julia; the consumer's stream then needs no ordering.
"""
function RsDLPack.array_address(x::ConcretePJRTArray{T}) where {T}
    whole = whole_buffer(x)  # first: it says what this Reactant lacks
    XLA = xla()
    buffer = XLA.synced_buffer(whole)
    isempty(x) || copyto!(Vector{T}(undef, 1), 1, x, 1, 1)
    return UInt(XLA.unsafe_buffer_pointer(buffer))
end

# In-place writes give `x` new buffers (Reactant's compiled functions set `x.data`): the ones
# shared stay rooted with `x`, so the consumer's memory outlives them.
RsDLPack.share_root(x::ConcretePJRTArray) = (x, x.data)

# A view of a Reactant array has no pointer of its own (Reactant's views compile into new
# buffers); Base calls it strided, so it is refused here, before anything is rooted.
RsDLPack.array_device(::SubArray{<:Any,<:Any,<:ConcretePJRTArray}) = throw(DLPackError(:buffer,
    "a view of a Reactant array: share the array itself and index the consumer's tensor."))
# A reshape of one (`reshape(x, :)`) likewise: Base calls it strided, and its pointer is the
# parent's, which Reactant does not give (a bare ErrorException).
# fatou-ignore non-public-access: reshape of a non-Array returns a Base.ReshapedArray, which has no public name
RsDLPack.array_device(::Base.ReshapedArray{<:Any,<:Any,<:ConcretePJRTArray}) = throw(DLPackError(:buffer,
    "a reshape of a Reactant array (a Base.ReshapedArray): share the array itself and reshape " *
    "the consumer's tensor, or share a reshaped copy (ConcreteRArray(reshape(Array(x), dims)))."))

RsDLPack.array_device(::ConcreteIFRTArray) = throw(DLPackError(:buffer,
    "a ConcreteIFRTArray (Reactant's xla_runtime preference is \"IFRT\"): IFRT does not give " *
    "its buffers' addresses. Use Reactant's default runtime, PJRT, whose arrays are shared " *
    "zero-copy, or share Array(x), a copy."))

end # module
