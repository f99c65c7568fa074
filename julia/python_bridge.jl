# The Python bridge's C entry points (bridges/python/src/c_abi/), over raw PyObject pointers.
# Both Python extensions (PyCall, PythonCall) go through these few functions, so the protocol
# lives in one place; the extensions only convert their object types to and from pointers.
# Must be called on the thread that holds the GIL (PyCall/PythonCall: the main thread): each
# call passes CALL_REFUSE_WITHOUT_GIL, so that from any other thread it throws at once instead
# of waiting for the GIL, which the main thread may never release while it waits for us.

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
                  copy_code(copy))
end

"Mirror of `RsdlPlanOptions` (bridges/python/src/c_abi/import_plan.rs): what the array should become."
struct PlanOptions
    element_code::Int64   # PLAN_ANY: any
    ndims::Int64          # PLAN_ANY: any
    target::UInt32        # TARGET_HOST_ARRAY (Array), TARGET_CUDA_ARRAY (CuArray)
    order::UInt32         # INDEX_ORDER_PRODUCER, INDEX_ORDER_REVERSED
    copy::Int32           # COPY_IF_NEEDED, COPY_NEVER, COPY_ALWAYS
    readonly::UInt32      # ACCESS_READ_ONLY: a read-only view is acceptable
    dense::UInt32         # DENSE_REQUIRED: only a plain dense array (typed forms)
    reserved::UInt32
end

const DimTuple = NTuple{MAX_NDIM,Int64}

"Mirror of `rsdlpack::layout::ArrayPlan` (src/layout/flat.rs): the whole plan, one struct."
struct ArrayPlan
    tensor::Ptr{Cvoid}      # owned handle (views, copies); C_NULL for empty results
    parent_address::UInt
    ndims::Int64
    dims::DimTuple
    parent_dims::DimTuple
    starts::DimTuple        # per parent dim: start:step:start+step*(len-1), 1-based
    steps::DimTuple
    lengths::DimTuple
    permutation::DimTuple   # per result dim: its parent dim, 1-based
    element_code::UInt32
    device_type::UInt32
    device_id::Int32
    kind::UInt8             # PLAN_KIND_VIEW, PLAN_KIND_EMPTY, PLAN_KIND_COPY
    read_only::UInt8
    needs_view::UInt8
    needs_permutation::UInt8
end

"Mirror of `RsdlImportResult`."
struct ImportResult
    plan::ArrayPlan
    released_roots::UInt64
end

"""
Mirror of `RsdlStridedPlan` (bridges/python/src/c_abi/strided_plan.rs): a strided plan, one
struct. A view's element at 0-based index `I` is span element `offset + Σ I[k]·strides[k]`.
"""
struct StridedPlan
    tensor::Ptr{Cvoid}      # owned handle (views, copies); C_NULL for empty results
    span_address::UInt      # views: the span's first element
    span_byte_offset::Int64
    span_len::Int64         # views: elements in the span; else the elements to allocate
    offset::Int64           # 0-based, in elements from the span's first
    ndims::Int64
    dims::DimTuple
    strides::DimTuple       # in elements, result order
    released_roots::UInt64
    element_code::UInt32
    device_type::UInt32
    device_id::Int32
    kind::UInt8             # PLAN_KIND_VIEW, PLAN_KIND_EMPTY, PLAN_KIND_COPY
    read_only::UInt8
    reserved::UInt16
end

"Mirror of `RsdlArrayExport`: a Julia array to share."
struct ArrayExport
    address::UInt
    dims::Ptr{Int64}
    strides::Ptr{Int64}
    ndims::Int64
    root_id::UInt64
    stream::UInt
    element_code::UInt32
    order::UInt32
    device_type::UInt32
    device_id::Int32
    read_only::UInt32
    reserved::UInt32
end

"Mirror of `RsdlShareResult`."
struct ShareResult
    exporter::Ptr{Cvoid}
    released_roots::UInt64
end

# The structs above, by the numbers `rsdlpack_struct_size` knows them by (RsdlStructId).
const MIRRORED_STRUCTS = (STRUCT_ID_IMPORT_OPTIONS => ImportOptions, STRUCT_ID_PLAN_OPTIONS => PlanOptions,
                          STRUCT_ID_IMPORT_RESULT => ImportResult, STRUCT_ID_ARRAY_EXPORT => ArrayExport,
                          STRUCT_ID_SHARE_RESULT => ShareResult, STRUCT_ID_STRIDED_PLAN => StridedPlan)

const PYTHON_BRIDGE = Ref{Ptr{Cvoid}}(C_NULL)
const PYTHON_SYMBOLS = Dict{Symbol,Ptr{Cvoid}}()
const PYTHON_SYMBOLS_LOCK = ReentrantLock()
# Looked up once at load: the calls every import makes, and the finalizers' release (which may
# take no lock).
const IMPORT_PLAN = Ref{Ptr{Cvoid}}(C_NULL)
const IMPORT_PLANS = Ref{Ptr{Cvoid}}(C_NULL)
const SHARE = Ref{Ptr{Cvoid}}(C_NULL)
const SHARE_INTO = Ref{Ptr{Cvoid}}(C_NULL)
const RELEASE_AFTER = Ref{Ptr{Cvoid}}(C_NULL)
const RELEASE_AFTER_KEPT = Ref{Ptr{Cvoid}}(C_NULL)
const RELEASE_LATER = Ref{Ptr{Cvoid}}(C_NULL)
const KEEP_STREAM_ALIVE = Ref{Ptr{Cvoid}}(C_NULL)

"Loads the Python bridge (called by the Python extensions' `__init__`)."
function load_python_bridge!()
    lock(PYTHON_SYMBOLS_LOCK) do
        PYTHON_BRIDGE[] == C_NULL || return
        library = Libdl.dlopen(python_library_path())
        size_of = Libdl.dlsym(library, :rsdlpack_struct_size)
        for (id, S) in MIRRORED_STRUCTS
            expected = ccall(size_of, Csize_t, (UInt32,), id)
            expected == sizeof(S) || error("RsDLPack: the Python bridge at $(python_library_path()) ",
                                           "has a $expected-byte $(nameof(S)), this package a $(sizeof(S))-byte one; ",
                                           "rebuild it (`Pkg.build(\"RsDLPack\")`)")
        end
        IMPORT_PLAN[] = Libdl.dlsym(library, :rsdlpack_py_import_plan_with_flags)
        IMPORT_PLANS[] = Libdl.dlsym(library, :rsdlpack_py_import_plans)
        SHARE[] = Libdl.dlsym(library, :rsdlpack_py_share_with_flags)
        SHARE_INTO[] = Libdl.dlsym(library, :rsdlpack_py_share_into_with_flags)
        RELEASE_AFTER[] = Libdl.dlsym(library, :rsdlpack_imported_release_after)
        RELEASE_AFTER_KEPT[] = Libdl.dlsym(library, :rsdlpack_imported_release_after_kept)
        RELEASE_LATER[] = Libdl.dlsym(library, :rsdlpack_imported_release_later)
        KEEP_STREAM_ALIVE[] = Libdl.dlsym(library, :rsdlpack_imported_keep_stream_alive)
        PYTHON_BRIDGE[] = library
    end
    return nothing
end

not_loaded() = DLPackError(:invalid, "the Python bridge is not loaded; `using PyCall` or `using PythonCall` first")

"An entry point looked up at load (`IMPORT_PLAN`, …), or the not-loaded error."
loaded(entry::Ref{Ptr{Cvoid}}) = entry[] == C_NULL ? throw(not_loaded()) : entry[]

function python_symbol(name::Symbol)
    lock(PYTHON_SYMBOLS_LOCK) do
        PYTHON_BRIDGE[] == C_NULL && throw(not_loaded())
        get!(() -> Libdl.dlsym(PYTHON_BRIDGE[], name), PYTHON_SYMBOLS, name)
    end
end

function bridge_error(code::Integer, message::Ptr{UInt8})
    text = message == C_NULL ? "(no message)" : unsafe_string(message)
    message == C_NULL || ccall(python_symbol(:rsdlpack_error_free), Cvoid, (Ptr{UInt8},), message)
    return native_error(code, text)
end

"""
    checked(call; on_error=nothing)

Runs `call(message)`, a `ccall` of an entry point that returns an error code and writes its
message through `message`, and throws that error unless the code is 0 (running `on_error()`
first, where given).
"""
@inline function checked(call; on_error=nothing)
    message = Ref{Ptr{UInt8}}(C_NULL)
    code = call(message)
    if code != 0
        on_error === nothing || on_error()
        throw(bridge_error(code, message[]))
    end
    return nothing
end

"""
    python_import_plan(object_pointer, options, plan_options, flags) -> ArrayPlan

One call: `__dlpack__` negotiation on a borrowed `PyObject*`, validation and the layout plan
for the array `plan_options` and `flags` (`CALL_REFUSE_WITHOUT_GIL`, `PLAN_WRITABLE_TYPE`)
describe. The plan's `tensor` (views and copies) is an owned handle: give it to a
`TensorOwner` at once.
"""
function python_import_plan(object::Ptr{Cvoid}, options::ImportOptions, plan_options::PlanOptions,
                            flags::UInt32)
    return import_through(loaded(IMPORT_PLAN), ImportResult, object, options, plan_options, flags).plan
end

"""
    python_import_plans(tuple_pointer, present, options, plan_options, flags) -> Vector{ArrayPlan}

`python_import_plan` for each item of the Python tuple at the borrowed `tuple_pointer`, in one
call (`rsdlpack_py_import_plans`); `present[k]` says whether item `k` is a tensor (the others
are `None`: their plans have a null `tensor` and mean nothing else). Each present plan's
`tensor` (views and copies) is an owned handle: give it to a `TensorOwner` at once. On error
nothing is held.
"""
function python_import_plans(objects::Ptr{Cvoid}, present::NTuple{N,Bool}, options::ImportOptions,
                             plan_options::PlanOptions, flags::UInt32) where {N}
    results = Vector{ImportResult}(undef, N)
    checked() do message
        ccall(loaded(IMPORT_PLANS), Int32,
              (Ptr{Cvoid}, Ref{ImportOptions}, Ref{PlanOptions}, UInt32, Ptr{ImportResult}, Csize_t, Ref{Ptr{UInt8}}),
              objects, options, plan_options, flags, results, N, message)
    end
    any(k -> present[k] && results[k].released_roots != 0, 1:N) && unroot_released!()
    return [r.plan for r in results]
end

"""
    python_import_strided_plan(object_pointer, options, plan_options, flags) -> StridedPlan

As `python_import_plan`, answering with the strided plan (`rsdlpack_py_import_strided_plan`):
any layout is a view over one flat span. Its `tensor` (views and copies) is an owned handle:
give it to a `TensorOwner` at once.
"""
function python_import_strided_plan(object::Ptr{Cvoid}, options::ImportOptions, plan_options::PlanOptions,
                                    flags::UInt32)
    return import_through(python_symbol(:rsdlpack_py_import_strided_plan), StridedPlan, object, options,
                          plan_options, flags)
end

# The call both import entry points share: they differ only in the result they write.
function import_through(entry::Ptr{Cvoid}, ::Type{R}, object::Ptr{Cvoid}, options::ImportOptions,
                        plan_options::PlanOptions, flags::UInt32) where {R}
    result = Ref{R}()
    checked() do message
        ccall(entry, Int32, (Ptr{Cvoid}, Ref{ImportOptions}, Ref{PlanOptions}, UInt32, Ref{R}, Ref{Ptr{UInt8}}),
              object, options, plan_options, flags, result, message)
    end
    result[].released_roots == 0 || unroot_released!()
    return result[]
end

"""
    python_tensor_device(object_pointer) -> Union{Nothing,Tuple{UInt32,Int32}}

The DLPack device (type, id) the tensor of a borrowed `PyObject*` lives on, or `nothing` where
the bridge declines the object (`rsdlpack_py_tensor_device` with `CALL_DECLINE_REFUSALS`: a
class, a capsule, an object without `__dlpack__`, a `__dlpack_device__` that raises). Other
errors throw. For the `pyconvert` rules, which pick their array type by device.
"""
function python_tensor_device(object::Ptr{Cvoid})
    device_type, device_id = Ref{UInt32}(0), Ref{Int32}(0)
    message = Ref{Ptr{UInt8}}(C_NULL)
    code = ccall(python_symbol(:rsdlpack_py_tensor_device), Int32,
                 (Ptr{Cvoid}, UInt32, Ref{UInt32}, Ref{Int32}, Ref{Ptr{UInt8}}), object,
                 UInt32(CALL_REFUSE_WITHOUT_GIL | CALL_DECLINE_REFUSALS), device_type, device_id, message)
    code == 0 && return (device_type[], device_id[])
    error = bridge_error(code, message[])  # frees the message
    error.kind === :declined && return nothing
    throw(error)
end

"""
    python_share(array_export) -> Ptr{Cvoid}

One call: describes the Julia array as a DLPack tensor rooted under `array_export.root_id` and
returns a new reference to a Python object with `__dlpack__`. On error nothing refers to the
root any more.
"""
function python_share(array::ArrayExport, flags::UInt32=UInt32(0))
    entry = loaded(SHARE)
    result = Ref{ShareResult}()
    checked(; on_error=unroot_released!) do message
        ccall(entry, Int32, (Ref{ArrayExport}, UInt32, Ref{ShareResult}, Ref{Ptr{UInt8}}),
              array, UInt32(CALL_REFUSE_WITHOUT_GIL) | flags, result, message)
    end
    return shared_object(result)
end

"""
    python_share_into(array_export, type_pointer) -> Ptr{Cvoid}

As `python_share`, but when `type_pointer` (borrowed) is a Python type the new reference is
an object of it, made by that type's DLPack C exchange API (`managed_tensor_to_py_object_no_sync`;
a type without one is refused); for any other object, an exporter as from `python_share`.
"""
function python_share_into(array::ArrayExport, type::Ptr{Cvoid}, flags::UInt32=UInt32(0))
    entry = loaded(SHARE_INTO)
    result = Ref{ShareResult}()
    checked(; on_error=unroot_released!) do message
        ccall(entry, Int32, (Ref{ArrayExport}, Ptr{Cvoid}, UInt32, Ref{ShareResult}, Ref{Ptr{UInt8}}),
              array, type, UInt32(CALL_REFUSE_WITHOUT_GIL | SHARE_EXPORTER_FOR_NON_TYPES) | flags, result, message)
    end
    return shared_object(result)
end

# A share's answer: the new reference (on error the root was unrooted, by `checked`'s `on_error`).
function shared_object(result::Ref{ShareResult})
    result[].released_roots == 0 || unroot_released!()
    return result[].exporter
end

"""
    TensorOwner(handle)

Owns one imported tensor's handle. The handle is taken out atomically, so whichever of
`release_now!` (explicit) and `release_later!` (the storage's finalizer) comes first releases
the tensor and the other does nothing. The stream a CUDA tensor was imported on is kept alive
by `keep_stream_alive!`, not here.
"""
mutable struct TensorOwner
    @atomic handle::Ptr{Cvoid}
    TensorOwner(handle::Ptr{Cvoid}) = new(handle)
end

take_handle!(owner::TensorOwner) = @atomicswap owner.handle = C_NULL

"""
Roots `stream`, the object whose finalizer would destroy the stream `owner`'s tensor was
imported on (a `CuStream`), until the tensor's release has recorded its event there: the bridge
gives the root back then, never before, and `unroot_released!` drops it. Were the owner to hold
the stream instead, a finalizer of each could run first when both become garbage together (a
task that imported and ended), and the release would record on a destroyed stream. Call it
before the owner is tied to its storage.
"""
function keep_stream_alive!(owner::TensorOwner, stream)
    id = root!(stream)
    ccall(KEEP_STREAM_ALIVE[], Cvoid, (Ptr{Cvoid}, UInt64), @atomic(owner.handle), id)
    return nothing
end

"""
Releases the tensor now: its producer's deleter runs at once on the thread that holds the GIL,
for a CUDA tensor once the work enqueued so far on the stream it was imported on, and on
`stream` (a DLPack stream value; -1 for none), is complete. Throws a `DLPackError` when that
ordering failed; the tensor is released regardless. `keeper`: the object whose finalizer would
destroy `stream` (the task's `CuStream`), rooted until the release has recorded its event there
(a graph capture of `stream` defers that past this call); `nothing` for none. The wait for the
GPU lets garbage collection run on other threads meanwhile (`gc_safe_call`).
"""
function release_now!(owner::TensorOwner, stream::Int64=Int64(-1), keeper=nothing)
    handle = take_handle!(owner)
    handle == C_NULL && return nothing
    if keeper === nothing
        entry = RELEASE_AFTER[]
        checked() do message
            gc_safe_call(entry, handle, stream, message)
        end
    else
        entry = RELEASE_AFTER_KEPT[]
        id = root!(keeper)
        checked() do message
            gc_safe_call(entry, handle, stream, id, message)
        end
        unroot_released!()
    end
    return nothing
end

# The explicit releases wait for the GPU inside the bridge (an event or a context
# synchronisation). A plain `ccall` leaves the thread outside a GC safepoint for that long, so a
# collection started on any other thread would wait for the GPU too. These calls mark the
# thread GC-safe around the foreign call — they touch no Julia object; the bridge calls back
# into Julia only through `@cfunction`s (Python deleters reaching juliacall), which switch back
# to GC-unsafe mode by themselves (Julia ≥ 1.9). `@ccall gc_safe=true` exists from Julia 1.12
# (1.12.0-DEV.2029; 1.13.0-DEV.70 on the 1.13 line): there it is used; before, the runtime's
# exported `jl_gc_safe_enter`/`jl_gc_safe_leave` pair does the same around a plain `ccall`
# (GPUToolbox.jl's `@gcsafe_ccall` makes the same choice).
const HAS_CCALL_GCSAFE = VERSION >= v"1.13.0-DEV.70" || v"1.12.0-DEV.2029" <= VERSION < v"1.13-"

@static if HAS_CCALL_GCSAFE
    gc_safe_call(entry::Ptr{Cvoid}, handle::Ptr{Cvoid}, stream::Int64, message::Ref{Ptr{UInt8}}) =
        @ccall gc_safe=true $entry(handle::Ptr{Cvoid}, stream::Int64, message::Ref{Ptr{UInt8}})::Int32
    gc_safe_call(entry::Ptr{Cvoid}, handle::Ptr{Cvoid}, stream::Int64, id::UInt64, message::Ref{Ptr{UInt8}}) =
        @ccall gc_safe=true $entry(handle::Ptr{Cvoid}, stream::Int64, id::UInt64, message::Ref{Ptr{UInt8}})::Int32
    gc_safe_call(entry::Ptr{Cvoid}, flags::UInt32, released::Ref{Csize_t}, message::Ref{Ptr{UInt8}}) =
        @ccall gc_safe=true $entry(flags::UInt32, released::Ref{Csize_t}, message::Ref{Ptr{UInt8}})::Int32
else
    function gc_safe_call(entry::Ptr{Cvoid}, handle::Ptr{Cvoid}, stream::Int64, message::Ref{Ptr{UInt8}})
        GC.@preserve message begin
            out = Base.unsafe_convert(Ptr{Ptr{UInt8}}, message)
            state = ccall(:jl_gc_safe_enter, Int8, ())
            code = ccall(entry, Int32, (Ptr{Cvoid}, Int64, Ptr{Ptr{UInt8}}), handle, stream, out)
            ccall(:jl_gc_safe_leave, Cvoid, (Int8,), state)
        end
        return code
    end
    function gc_safe_call(entry::Ptr{Cvoid}, handle::Ptr{Cvoid}, stream::Int64, id::UInt64, message::Ref{Ptr{UInt8}})
        GC.@preserve message begin
            out = Base.unsafe_convert(Ptr{Ptr{UInt8}}, message)
            state = ccall(:jl_gc_safe_enter, Int8, ())
            code = ccall(entry, Int32, (Ptr{Cvoid}, Int64, UInt64, Ptr{Ptr{UInt8}}), handle, stream, id, out)
            ccall(:jl_gc_safe_leave, Cvoid, (Int8,), state)
        end
        return code
    end
    function gc_safe_call(entry::Ptr{Cvoid}, flags::UInt32, released::Ref{Csize_t}, message::Ref{Ptr{UInt8}})
        GC.@preserve released message begin
            count = Base.unsafe_convert(Ptr{Csize_t}, released)
            out = Base.unsafe_convert(Ptr{Ptr{UInt8}}, message)
            state = ccall(:jl_gc_safe_enter, Int8, ())
            code = ccall(entry, Int32, (UInt32, Ptr{Csize_t}, Ptr{Ptr{UInt8}}), flags, count, out)
            ccall(:jl_gc_safe_leave, Cvoid, (Int8,), state)
        end
        return code
    end
end

"""
For finalizers: only queues the release (no Python code, no lock, no task switch; a CUDA
tensor gets an event on its import's stream, a driver call that does not wait). The next
RsDLPack call on the Python thread runs the producer's deleter once that event has completed;
`flush_releases()` waits for it.
"""
function release_later!(owner::TensorOwner)
    handle = take_handle!(owner)
    handle == C_NULL || ccall(RELEASE_LATER[], Cvoid, (Ptr{Cvoid},), handle)
    return nothing
end

"Copies the planned tensor into `A` (allocated with the plan's dims), then releases it."
function copy_into!(A::DenseArray, handle::Ptr{Cvoid})
    entry = python_symbol(:rsdlpack_imported_copy_into)
    checked() do message
        GC.@preserve A ccall(entry, Int32, (Ptr{Cvoid}, Ptr{Cvoid}, Csize_t, Ref{Ptr{UInt8}}),
                             handle, pointer(A), sizeof(A), message)
    end
    return A
end

"""
    flush_releases() -> Int

Runs the deleters of Python-produced tensors whose release was queued (garbage-collected
arrays: finalizers only queue, and the next RsDLPack call on the Python thread drains the
queue anyway, except CUDA tensors whose import stream's work is still running, which this waits
for — garbage collection on other threads runs meanwhile — and those whose release could record
no event and must synchronise their device's context, which only this does: call it where no
CUDA graph is being captured), and unroots Julia arrays whose exported tensors were released. Call it from the thread
that holds the GIL: from another it throws a `DLPackError` at once (after the unrooting)
rather than wait for the GIL. Returns how many Python releases ran.
"""
function flush_releases()
    unroot_released!()
    PYTHON_BRIDGE[] == C_NULL && return 0
    released = Ref{Csize_t}(0)
    entry = python_symbol(:rsdlpack_py_flush_releases_with_flags)
    checked() do message
        gc_safe_call(entry, UInt32(CALL_REFUSE_WITHOUT_GIL), released, message)
    end
    return Int(released[])
end

"How many released Python-produced tensors wait for their deleters (see `flush_releases`)."
pending_releases() =
    PYTHON_BRIDGE[] == C_NULL ? 0 : Int(ccall(python_symbol(:rsdlpack_py_pending_releases), Csize_t, ()))

"""
Takes up to `length(batch)` root ids whose exported tensors were released into `batch`;
returns how many.
"""
take_released_roots!(batch::Vector{UInt64}) =
    Int(ccall(python_symbol(:rsdlpack_py_take_released_roots), Csize_t, (Ptr{UInt64}, Csize_t), batch, length(batch)))
