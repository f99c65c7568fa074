# ChainRulesCore's rrule for RsDLPack.PyFunction (julia/autodiff.jl) and for module_apply (the
# torch Lux layer's call): the Python half (python/rsdlpack_autodiff.py) records the VJP and
# decides every tangent's kind; here its answers become ChainRulesCore's types.
#
# ChainRulesCore names used, traced at v1.0.0 and v1.26.1 (the ends of [compat] "1"): rrule,
# NoTangent, ZeroTangent, AbstractZero, unthunk, Tangent and its constructors `Tangent{P}(; kw...)`
# (NamedTuple primals) and `Tangent{P}(args...)` (Tuple primals), and `getindex` on a Tangent
# (its backing's element) and on an AbstractZero (itself): src/differentials/ at v1.0.0,
# src/tangent_types/ at v1.26.1. Zygote 0.7 hands a tuple-valued output's cotangent over as a
# Tangent{Any} of the elements, `nothing` ones as ZeroTangent (src/compiler/chainrules.jl,
# wrap_chainrules_input).
# fatou-ignore-file type-piracy: an extension adds ChainRulesCore methods for RsDLPack's own types
# fatou-ignore-file non-public-access: an extension is part of RsDLPack and calls the functions julia/autodiff.jl declares for it
module RsDLPackChainRulesCoreExt

using ChainRulesCore: ChainRulesCore, NoTangent, ZeroTangent, AbstractZero, Tangent, unthunk
import RsDLPack
using RsDLPack: PyFunction

# A Python answer (an array, or a kind code) as a ChainRulesCore tangent.
tangent(x::AbstractArray) = x
tangent(kind::Integer) = kind == RsDLPack.KIND_ZERO ? ZeroTangent() : NoTangent()

# Output k's cotangent as the pullback gets it (an array, or `nothing` for zero).
function output_cotangent(ȳ, k::Int, single::Bool)
    c = unthunk(ȳ)
    c isa AbstractZero && return nothing
    c = single ? c : unthunk(c[k])
    return c isa AbstractZero || c === nothing ? nothing : c
end

function ChainRulesCore.rrule(f::PyFunction, args...)
    outputs, pullback, codes = RsDLPack.forward_call(f, args)
    single = codes[1] == RsDLPack.STRUCTURE_SINGLE
    function py_function_pullback(ȳ)
        cotangents = ntuple(RsDLPack.output_count(codes)) do k
            RsDLPack.output_is_differentiable(codes, k) ? output_cotangent(ȳ, k, single) : nothing
        end
        tangents = RsDLPack.pullback_call(f, pullback, cotangents)
        return (NoTangent(), map(tangent, tangents)...)
    end
    return outputs, py_function_pullback
end

function ChainRulesCore.rrule(::typeof(RsDLPack.module_apply), call::RsDLPack.TorchModuleCall, training::Bool,
                              ps::NamedTuple, buffers::NamedTuple, inputs::Tuple)
    results, back = RsDLPack.with_module_arguments((f, arguments) -> ChainRulesCore.rrule(f, arguments...), call,
                                                   training, ps, buffers, inputs)
    n, np, nb = RsDLPack.output_count(call, results), length(ps), length(buffers)
    function module_apply_pullback(ȳ)
        # ȳ is the cotangent of (y, new_buffers); the buffers carry none back.
        c = unthunk(ȳ)
        dy = c isa AbstractZero ? c : unthunk(c[1])
        outputs = n == 1 ? (dy,) : ntuple(k -> dy isa AbstractZero ? dy : dy[k], n)
        grads = Base.tail(back((outputs..., ntuple(_ -> ZeroTangent(), nb)...)))
        by_name = NamedTuple{Tuple(call.parameter_names)}(ntuple(k -> grads[k], np))
        dps = Tangent{typeof(ps)}(; NamedTuple{keys(ps)}(map(name -> by_name[name], keys(ps)))...)  # in ps's own order
        dinputs = Tangent{typeof(inputs)}(ntuple(k -> grads[np+nb+k], length(inputs))...)
        return (NoTangent(), NoTangent(), NoTangent(), dps, NoTangent(), dinputs)
    end
    return RsDLPack.split_results(call, results), module_apply_pullback
end

end # module
