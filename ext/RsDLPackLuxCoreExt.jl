# The Lux layer over a torch nn.Module (`RsDLPack.torch_layer`, julia/autodiff.jl): parameters
# and buffers by name, Julia's own arrays, called as torch.func.functional_call calls it, on the Python side.
#
# LuxCore names used, traced at LuxCore-v1.0.0 and LuxCore-v1.5.3 (lib/LuxCore/src/LuxCore.jl
# in LuxDL/Lux.jl; the ends of [compat] "1"): AbstractLuxLayer, initialparameters and
# initialstates (methods taking `(::AbstractRNG, layer)`: LuxCore's own fallback
# `(::AbstractRNG, ::Union{AbstractLuxLayer,Nothing})` makes an untyped rng ambiguous), and
# trainmode/testmode, which set every `training` key of a state to Val(true)/Val(false)
# (update_state; needs Functors loaded, as Optimisers and Lux load it). Random.AbstractRNG is
# Random's (a stdlib), which LuxCore loads: hence this extension's second trigger.
# fatou-ignore-file type-piracy: an extension adds LuxCore methods for RsDLPack's own types
# fatou-ignore-file non-public-access: an extension is part of RsDLPack and calls the functions julia/autodiff.jl declares for it
module RsDLPackLuxCoreExt

using LuxCore: LuxCore, AbstractLuxLayer
using Random: Random, AbstractRNG
import RsDLPack
using RsDLPack: TorchModuleCall

"A torch `nn.Module` as a Lux layer (made by `RsDLPack.torch_layer`)."
struct TorchLayer{O} <: AbstractLuxLayer
    call::TorchModuleCall{O}
end

RsDLPack.lux_layer_type(::Type{<:TorchModuleCall}) = TorchLayer

LuxCore.initialparameters(::AbstractRNG, l::TorchLayer) = RsDLPack.initial_arrays(l.call, "initial_parameters")
LuxCore.initialstates(::AbstractRNG, l::TorchLayer) =
    (buffers=RsDLPack.initial_arrays(l.call, "initial_buffers"), training=Val(true))

function (l::TorchLayer)(x, ps, st::NamedTuple)
    training = st.training isa Val{true}
    y, buffers = RsDLPack.module_apply(l.call, training, ps, st.buffers, x isa Tuple ? x : (x,))
    return y, merge(st, (; buffers=buffers))
end

function Base.show(io::IO, l::TorchLayer)
    print(io, "TorchLayer(", length(l.call.parameter_names), " parameters, ", length(l.call.buffer_names), " buffers)")
end

end # module
