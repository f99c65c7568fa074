# Differentiable calls into PyTorch and JAX: the Julia half. python/rsdlpack_autodiff.py decides
# everything (which outputs are differentiable, which cotangents are acceptable, what the
# forward saves and for how long); this file shares the arrays, calls it, and maps its integer
# answers to Julia values. ChainRulesCore's `rrule` (ext/RsDLPackChainRulesCoreExt.jl) and the
# Lux layer (ext/RsDLPackLuxCoreExt.jl) are built on `forward_call` and `pullback_call` here;
# the Python front-ends (PyCall, PythonCall) add the few object operations below.

# The Python module's codes (python/rsdlpack_autodiff.py; test/python/test_autodiff.py checks
# that the two agree).
const KIND_NO_TANGENT = 0  # input: NoTangent; output: not differentiable
const KIND_TANGENT = 1     # input: a cotangent array follows; output: differentiable
const KIND_ZERO = 2        # input: ZeroTangent
const KIND_NONE = 3        # output: Python returned None (`nothing`)
const STRUCTURE_SINGLE = 0  # the function returned one value (else a tuple)
const SHARE_INTO_TYPE = 1   # share inputs into the callable's tensor_type (else as exporters)

"""
Where the Python half lives: the package's python/ directory (shipped with the package), asked
for at run time, so that a depot moved after precompiling still finds it; the source tree's
where RsDLPack was not loaded as a package.
"""
autodiff_python_dir() = something(pkgdir(@__MODULE__, "python"), joinpath(PACKAGE_DIR, "python"))
const AUTODIFF_MODULE = "rsdlpack_autodiff"

# Front-end operations, one method each in the PyCall and PythonCall extensions for their
# object type (no conversion of results unless named):
"The imported `rsdlpack_autodiff` module, as the front-end's object of the same kind as `like`."
function autodiff_module end
"Calls the Python callable `f` with `args` (Julia numbers, strings, `nothing` and Python objects) and keyword arguments; returns the Python object."
function python_call end
"The attribute `name` (a String) of a Python object, unconverted."
function python_attribute end
"A Python sequence of ints as a `Vector{Int}`."
function python_ints end
"A Python sequence as a `Vector` of the front-end's objects."
function python_items end
"A Python sequence of strings as a `Vector{String}`."
function python_strings end
"Lets go of this reference now rather than at garbage collection; anything else: nothing to do."
python_release!(_) = nothing
"""
`import_dlpack_all` on a Python tuple (`from_dlpack(Array, x; order)` for each item where
`present`, in one call into the bridge).
"""
function python_import_all end

"""
    PyFunction(f; backend=nothing, order=:reversed, retain_pullback=false)

A Julia callable over the Python callable `f` (a PyCall `PyObject` or PythonCall `Py`): a torch
function or `nn.Module` (its parameters are constants here), or a JAX function, jitted or
not. Called with Julia arrays (`Array`, strided views, `CuArray`s with CUDA loaded), it
shares them zero-copy, calls `f`, and returns Julia arrays over the outputs' memory: one
array, or a tuple for a tuple of outputs (`nothing` where `f` returned None, integer and
boolean outputs as arrays that carry no gradient). `nothing`, numbers and strings are passed
as Python values.

With ChainRulesCore loaded it has an `rrule` (so Zygote differentiates through it): the
forward records the vector-Jacobian product in Python (torch's autograd, `jax.vjp`), and the
pullback shares the cotangents zero-copy and returns the input cotangents as Julia arrays over
their memory (`NoTangent` for integer inputs and non-arrays, `ZeroTangent` where no gradient
flows).

- `backend`: `"torch"` or `"jax"`; inferred from torch modules and functions and from jitted
  JAX functions, required for other callables (a Python `lambda`).
- `order=:reversed` (the default): a Julia `(features, batch)` array reaches torch and JAX as
  a contiguous `(batch, features)` tensor, and outputs come back reversed the same way
  (`share` and `from_dlpack` with `order=:reversed`); `order=:producer` keeps Julia's indices
  (column-major strides in Python).
- `retain_pullback=true` lets a pullback run more than once (`Zygote.jacobian` does): what the
  forward saved is then held until the pullback is collected. By default it is let go as soon
  as the pullback has run, or when it is collected uncalled.

The inputs the forward saved stay alive (rooted, as for `share`) exactly that long. An input
that `f` writes in place is reported by an error, not differentiated. Call from the thread
that holds Python's GIL.
"""
struct PyFunction{O}
    python::O    # the rsdlpack_autodiff.Function or .Module
    forward::O   # its `forward` method
    into::Any    # what inputs are shared into: torch.Tensor (its C exchange API), or the type O (an exporter)
    order::Symbol
    prefix::Tuple  # values passed before the arrays (a module call's `training`)
end

function PyFunction(f; backend::Union{Nothing,AbstractString}=nothing, order::Symbol=:reversed,
                    retain_pullback::Bool=false)
    o = autodiff_object(f)
    o === nothing && throw(not_python(f, "PyFunction"))
    index_order_code(order)  # an unknown order is refused before Python is asked anything
    python = python_call(python_attribute(autodiff_module(o), "Function"), o;
                         backend_name=backend, order=String(order), retain=retain_pullback)
    return autodiff_function(python, order)
end

"The Python object `x` stands for (a front-end's object, or a wrapper of one), or `nothing`."
autodiff_object(x) = python_object(x)

"The `PyFunction` over an `rsdlpack_autodiff` object (a Function, or a Module with `prefix`)."
function autodiff_function(python::O, order::Symbol, prefix::Tuple=()) where {O}
    index_order_code(order)  # refuses an unknown order before anything is shared
    into_type = python_ints(python_attribute(python, "share_codes"))[1] == SHARE_INTO_TYPE
    into = into_type ? python_attribute(python, "tensor_type") : O
    return PyFunction{O}(python, python_attribute(python, "forward"), into, order, prefix)
end

"""
    forward_call(f::PyFunction, args) -> (outputs, pullback, codes)

Shares the array arguments, runs the Python forward and imports its outputs; `pullback` is the
Python pullback (for `pullback_call`), `codes` the output kinds and devices as Python decided.
"""
function forward_call(f::PyFunction, args::Tuple)
    shared = map(a -> share_argument(f, a), args)
    # The inputs are the forward's now (or nobody's, if it threw): their roots come back once it lets go.
    result = try
        python_call(f.forward, f.prefix..., shared...)
    finally
        release_shared!(args, shared)
    end
    codes = python_ints(python_attribute(result, "codes"))
    objects = python_attribute(result, "outputs")
    pullback = python_attribute(result, "pullback")
    python_release!(result)
    structure, n = codes[1], codes[2]
    # An import that throws leaves no Python object held: the outputs, and the pullback with
    # the inputs it saved, are released on the way out.
    outputs = try
        import_results(f, objects, ntuple(k -> codes[2+k] == KIND_NONE ? nothing : codes[2+n+k], n))
    catch
        python_release!(pullback)
        rethrow()
    finally
        python_release!(objects)
    end
    return (structure == STRUCTURE_SINGLE ? outputs[1] : outputs), pullback, codes
end

function (f::PyFunction)(args...)
    outputs, pullback, _ = forward_call(f, args)
    python_release!(pullback)  # no gradient asked for: what the forward saved goes now
    return outputs
end

"Whether output `k` (1-based) of a forward's `codes` is differentiable."
output_is_differentiable(codes::Vector{Int}, k::Integer) = codes[2+k] == KIND_TANGENT
output_count(codes::Vector{Int}) = codes[2]

"""
    pullback_call(f::PyFunction, pullback, cotangents) -> Tuple

Runs the Python pullback on `cotangents` (one per output: an array, or `nothing` for zero),
shared zero-copy, and returns one entry per input: its cotangent array, or `KIND_ZERO` /
`KIND_NO_TANGENT` (the ChainRulesCore extension maps them to its zero types).
"""
function pullback_call(f::PyFunction, pullback, cotangents::Tuple)
    shared = map(c -> c === nothing ? nothing : share_argument(f, c), cotangents)
    result = try
        python_call(pullback, shared...)
    finally
        release_shared!(cotangents, shared)
    end
    codes = python_ints(python_attribute(result, "codes"))  # the kinds, then the devices
    objects = python_attribute(result, "tensors")
    python_release!(result)
    n = length(codes) ÷ 2
    arrays = try
        import_results(f, objects, ntuple(k -> codes[k] == KIND_TANGENT ? codes[n+k] : nothing, n))
    finally
        python_release!(objects)
    end
    return ntuple(k -> codes[k] == KIND_TANGENT ? arrays[k] : codes[k], n)
end

"""
    import_results(f::PyFunction, objects, devices::Tuple) -> Tuple

The arrays over the tensors of the Python tuple `objects` (a forward's outputs, a pullback's
cotangents): `nothing` where `devices[k]` is `nothing` (no tensor there), else an array of the
type for DLPack device type `devices[k]`. When every tensor is on the host, all come in one call
into the bridge; otherwise each is imported by itself.
"""
function import_results(f::PyFunction, objects, devices::Tuple)
    any(!isnothing, devices) || return map(_ -> nothing, devices)
    all(d -> d === nothing || d == KDLCPU, devices) &&
        return python_import_all(objects, map(!isnothing, devices), f.order)
    items = python_items(objects)
    try
        return ntuple(k -> devices[k] === nothing ? nothing : import_result(f, items[k], devices[k]), length(devices))
    finally
        foreach(python_release!, items)
    end
end

# An argument as Python gets it: arrays shared zero-copy (anything `share` cannot describe,
# such as a FillArrays cotangent or an `Adjoint`, collected first), other values as they are.
share_argument(f::PyFunction, A::AbstractArray) = share(shareable(A), f.into; order=f.order)
# A read-only array goes as an exporter, which carries DLPack's READ_ONLY flag (a type's C
# exchange API, torch.Tensor's, makes writable tensors only, and refuses it); an in-place write
# into it is still reported by the Python half.
share_argument(f::PyFunction{O}, A::ReadOnlyArray) where {O} = share(A, O; order=f.order)
share_argument(::PyFunction, x) = x
# Lets go of the objects `share_argument` made (only those: a Python object passed in is the caller's).
release_shared!(args::Tuple, shared::Tuple) =
    foreach((a, s) -> a isa AbstractArray && python_release!(s), args, shared)
shareable(A::AbstractArray) = is_strided(A) ? A : collect(A)

function import_result(f::PyFunction, o, device::Integer)
    T = array_type_for(Val(UInt32(device)))
    T === nothing && throw(DLPackError(:buffer, "a Python result on DLPack device type $device has no Julia " *
                                                "array type here (CUDA: `using CUDA` first)"))
    return from_dlpack(T, o; order=f.order)
end

"""
    torch_layer(module; order=:reversed)

A Lux layer (`LuxCore.AbstractLuxLayer`) over the torch `nn.Module` `module` (a PyCall
`PyObject` or PythonCall `Py`), called functionally on parameters Julia owns:
`initialparameters` gives the module's parameters as Julia arrays (copies; a `NamedTuple` by
parameter name, as `named_parameters()` names them), `initialstates` its buffers
(`st.buffers`) and `training = Val(true)`. `layer(x, ps, st)` runs
`module(x...)` as `torch.func.functional_call(module, parameters_and_buffers, (x...,))` does on the arrays shared
zero-copy and returns `(y, st)`, the buffers after the call (batch-norm statistics, updated in
training mode) being the new state; Julia's own buffer arrays are never written.
The tensors the parameters were shared as are kept from one call to the next while the same
arrays come (`Optimisers.update!` writes into them), so that only the inputs and buffers cross at
each step.
`LuxCore.trainmode`/`testmode` select the module's train/eval mode. Gradients with respect to
`ps` and `x` come through `PyFunction`'s `rrule` (ChainRulesCore loaded, as Zygote does).
`order` as for [`PyFunction`](@ref): by default a torch `(out, in)` weight is Julia's
`(in, out)` array, and `x` is `(features, batch)`. Needs LuxCore (or Lux) loaded.
"""
function torch_layer(m; order::Symbol=:reversed)
    o = autodiff_object(m)
    o === nothing && throw(not_python(m, "torch_layer"))
    index_order_code(order)
    layer = lux_layer_type(TorchModuleCall)  # before Python is asked anything
    layer === nothing && throw(ArgumentError("torch_layer makes a Lux layer: `using LuxCore` (or `using Lux`) first"))
    return layer(TorchModuleCall(o, order))
end

"The Lux layer type over a module call (the LuxCore extension's), or `nothing` without LuxCore."
lux_layer_type(_) = nothing

"""
The parameters' tensors a layer's last call shared, kept for its next. An optimiser that
updates the parameter arrays in place (`Optimisers.update!`, Lux's training API) hands the same
arrays to every step; as a torch module keeps its parameters' tensors, only the inputs and
buffers then cross. An entry is reused for the same `Array` at the same address only; any other parameter
is shared anew and its entry let go. `CuArray`s are shared at every call, which orders Julia's
work on them before torch's then (a kept tensor would skip that). A call takes the entries
while it runs, so that a concurrent call of the same layer shares its own.
"""
mutable struct KeptParameters
    lock::ReentrantLock
    entries::Vector{Any}  # per parameter, in the module's order: a KeptTensor or nothing
end

"A parameter array and the tensor it was shared as, at the address and size it was shared with."
struct KeptTensor{O}
    array::Array
    address::UInt
    size::Tuple  # a Vector resized in place keeps its identity, and may keep its address
    tensor::O
end

const NO_ENTRIES = Any[]  # never written: what `entries` holds while a call has them

function take_kept!(kept::KeptParameters, n::Int)
    entries = lock(kept.lock) do
        taken = kept.entries
        kept.entries = NO_ENTRIES
        taken
    end
    return entries === NO_ENTRIES ? Vector{Any}(nothing, n) : entries
end

"Gives a call's entries back, or lets them go where another call gave its own back meanwhile."
function put_back_kept!(kept::KeptParameters, entries::Vector{Any})
    stored = lock(kept.lock) do
        kept.entries === NO_ENTRIES || return false
        kept.entries = entries
        return true
    end
    stored || foreach(e -> e === nothing || python_release!(e.tensor), entries)
    return nothing
end

"Parameter `k` as the call passes it: the kept tensor where it is still `A`'s, else shared anew."
function kept_tensor!(f::PyFunction, entries::Vector{Any}, k::Int, A)
    entry = entries[k]
    entry !== nothing && entry.array === A && entry.address == array_address(A) && entry.size == size(A) &&
        return entry.tensor
    entry === nothing || python_release!(entry.tensor)
    entries[k] = nothing
    A isa Array || return A  # the call shares it, as any argument
    tensor = share_argument(f, A)
    entries[k] = KeptTensor(A, array_address(A), size(A), tensor)
    return tensor
end

"""
The Python half of a torch layer: `rsdlpack_autodiff.Module(module)`, its parameter and buffer
names, and its two calls (training, and not).
"""
struct TorchModuleCall{O}
    python::O
    order::Symbol
    parameter_names::Vector{Symbol}
    buffer_names::Vector{Symbol}
    train::PyFunction{O}
    test::PyFunction{O}
    kept::KeptParameters
end

function TorchModuleCall(m::O, order::Symbol) where {O}
    python = python_call(python_attribute(autodiff_module(m), "Module"), m; order=String(order))
    names(field) = Symbol.(python_strings(python_attribute(python, field)))
    return TorchModuleCall{O}(python, order, names("parameter_names"), names("buffer_names"),
                              autodiff_function(python, order, (true,)), autodiff_function(python, order, (false,)),
                              KeptParameters(ReentrantLock(), NO_ENTRIES))
end

"""
The module's initial parameters (`which = "initial_parameters"`) or buffers
(`"initial_buffers"`) as Julia's arrays, in a `NamedTuple` by name: copies the Python half made,
on the module's device; host ones copied again into Julia's own memory (an `Array`), device ones
held as they are (a `CuArray` over the copy, which nothing else holds).
"""
function initial_arrays(call::TorchModuleCall, which::String)
    parameters = which == "initial_parameters"
    names = parameters ? call.parameter_names : call.buffer_names
    devices = python_ints(python_attribute(call.python, parameters ? "parameter_devices" : "buffer_devices"))
    objects = python_items(python_call(python_attribute(call.python, which)))
    arrays = map(objects, devices) do o, device
        device == KDLCPU ? from_dlpack(Array, o; order=call.order, copy=true) : import_result(call.train, o, device)
    end
    foreach(python_release!, objects)
    return NamedTuple{Tuple(names)}(Tuple(arrays))
end

"""
    module_apply(call::TorchModuleCall, training::Bool, ps::NamedTuple, buffers::NamedTuple, inputs::Tuple)
        -> (y, new_buffers)

A module call on parameters and buffers by name (in whatever order `ps` and `buffers` hold
them): the module's output (a tuple for several) and its buffers after the call, a
`NamedTuple` in the module's order. Its `rrule` (ChainRulesCore extension) gives `ps` a
structural tangent by name, so Zygote's gradient with respect to `ps` is a `NamedTuple` like
`ps`; the buffers have none.
"""
function module_apply(call::TorchModuleCall, training::Bool, ps::NamedTuple, buffers::NamedTuple, inputs::Tuple)
    results = with_module_arguments((f, arguments) -> f(arguments...), call, training, ps, buffers, inputs)
    return split_results(call, results)
end

"The Python call's flat results as (the module's output, its buffers by name): the buffers come last."
function split_results(call::TorchModuleCall, results::Tuple)
    n = output_count(call, results)
    y = n == 1 ? results[1] : results[1:n]
    return y, NamedTuple{Tuple(call.buffer_names)}(results[n+1:end])
end

output_count(call::TorchModuleCall, results::Tuple) = length(results) - length(call.buffer_names)

module_function(call::TorchModuleCall, training::Bool) = training ? call.train : call.test

"""
`g(f, arguments)` for the module's `PyFunction` `f` (training or not) and the Python call's
arguments: the parameters (as `KeptParameters` keeps them), then the buffers, each in the
module's order, then the inputs.
"""
function with_module_arguments(g, call::TorchModuleCall, training::Bool, ps::NamedTuple, buffers::NamedTuple,
                               inputs::Tuple)
    f = module_function(call, training)
    parameters = by_name(ps, call.parameter_names, "parameter")
    buffer_values = by_name(buffers, call.buffer_names, "buffer")  # refused before anything is shared
    entries = take_kept!(call.kept, length(parameters))
    try
        tensors = ntuple(k -> kept_tensor!(f, entries, k, parameters[k]), length(parameters))
        return g(f, (tensors..., buffer_values..., inputs...))
    finally
        put_back_kept!(call.kept, entries)
    end
end

function by_name(values::NamedTuple, names::Vector{Symbol}, what::String)
    length(values) == length(names) && all(n -> haskey(values, n), names) && return map(n -> values[n], Tuple(names))
    throw(ArgumentError("the module's $(what)s are $(Tuple(names)); got a NamedTuple with keys $(keys(values))"))
end
