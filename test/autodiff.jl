# Differentiable calls into torch and JAX (julia/autodiff.jl, ext/RsDLPackChainRulesCoreExt.jl):
# Zygote's gradients through a PyFunction equal torch's and JAX's own on the same numbers, the
# Python half's kinds become ChainRulesCore's types, and a pullback dropped uncalled lets go of
# its inputs. Included by runtests.jl in each front-end's process; the Python side of the cases
# is test/autodiff_helpers.py (the Python half itself is tested by test/python/test_autodiff.py).

using Zygote: Zygote
using ChainRulesCore: ChainRulesCore, NoTangent, ZeroTangent
using RsDLPack: PyFunction, torch_layer

const ADH = pyimport_("autodiff_helpers")
adh(name, args...) = pycall_(getproperty(ADH, Symbol(name)), args...)
"A tensor made by the helpers, as Julia's own array with reversed dims (a torch (5, 4) is 4×5)."
owned(t) = from_dlpack(Array, t; order=:reversed, copy=true)
owned_all(ts, n) = ntuple(k -> owned(pycall_(getproperty(pyimport_("operator"), :getitem), ts, k - 1)), n)
"The text of what a Python call threw."
thrown(f) = try f(); "" catch e; sprint(showerror, e) end
"Runs the Python garbage collector and the releases it queued, then unroots what was released."
settle() = (GC.gc(); py("collect_garbage"); flush_releases(); RsDLPack.rooted_count())

if jl(Bool, "has", "torch")
    @testset "$FRONTEND: PyFunction over a torch function, through Zygote" begin
        f = PyFunction(adh("torch_function"); backend="torch")
        a, b = adh("data", 0, 5, 4, "float64"), adh("data", 1, 4, 3, "float64")
        A, B = owned(a), owned(b)  # 4×5 and 3×4: torch's a @ b is Julia's B * A
        Y = f(A, B)
        @test Y isa Matrix{Float64} && size(Y) == (3, 5)
        @test Y ≈ tanh.(B * A)
        @test f(ReadOnlyArray(A), B) ≈ Y  # a read-only array goes as an exporter (torch.from_dlpack)
        gA, gB = Zygote.gradient((x, w) -> sum(abs2, f(x, w)) / 2, A, B)
        want_a, want_b = owned_all(adh("half_sum_of_squares_grads_torch", adh("torch_function"), a, b), 2)
        @test gA ≈ want_a && gB ≈ want_b
        # float32 too.
        A32, B32 = Float32.(A), Float32.(B)
        g32 = Zygote.gradient(x -> sum(abs2, f(x, B32)) / 2, A32)[1]
        @test g32 isa Matrix{Float32}
        @test g32 ≈ want_a rtol = 1e-4

        # Several outputs: differentiable, integer (no tangent), nothing, a view of the input.
        g = PyFunction(adh("torch_several"); backend="torch")
        y, i, none, v = g(A)
        @test y ≈ sin.(A) && i isa Vector{Int64} && none === nothing && v == A[1:2, :]
        (gS,) = Zygote.gradient(x -> begin
                                    y, _, _, v = g(x)
                                    sum(y) + 2 * sum(v)
                                end, A)
        @test gS ≈ cos.(A) .+ 2 .* [k <= 2 for k in 1:4, _ in 1:5]

        # The rule itself: an integer input has NoTangent, an unused output's zero flows back as zero.
        h = PyFunction(make("lambda a, i: a[i] * 2"); backend="torch")
        out, back = ChainRulesCore.rrule(h, [1.0, 2.0, 3.0], [2, 0])
        @test out == [6.0, 2.0]
        @test back([1.0, 1.0]) == (NoTangent(), [2.0, 0.0, 2.0], NoTangent())
        out, back = ChainRulesCore.rrule(h, [1.0, 2.0, 3.0], [2, 0])
        @test back(ZeroTangent()) == (NoTangent(), ZeroTangent(), NoTangent())

        # A cotangent of the wrong shape: the Python half's error names the output and both shapes.
        out, back = ChainRulesCore.rrule(f, A, B)
        @test occursin("the cotangent of output 1 is 5×3, but output 1 is 3×5", thrown(() -> back(zeros(5, 3))))
        # A pullback runs once, unless retained (Zygote.jacobian calls it once per output element).
        @test back(zeros(3, 5))[2] == zeros(4, 5)
        @test occursin("retain_pullback=true", thrown(() -> back(zeros(3, 5))))
        fr = PyFunction(adh("torch_function"); backend="torch", retain_pullback=true)
        J = Zygote.jacobian(x -> fr(x, B), A)[1]
        # sum's cotangent is a FillArrays.Fill, which is collected before it is shared.
        @test size(J) == (15, 20) && vec(sum(J; dims=1)) ≈ vec(Zygote.gradient(x -> sum(fr(x, B)), A)[1])

        # order=:producer keeps Julia's dims: torch sees A as 4×5 and returns A .* 2 as 4×5.
        p = PyFunction(make("lambda a: a * 2"); backend="torch", order=:producer)
        @test p(A) ≈ 2 .* A && size(p(A)) == (4, 5)
    end

    @testset "$FRONTEND: a forward's inputs are held until its pullback ran or was dropped" begin
        f = PyFunction(adh("torch_function"); backend="torch")
        A, B = rand(4, 5), rand(3, 4)
        before = settle()
        Y, back = ChainRulesCore.rrule(f, A, B)
        @test settle() == before + 2  # A and B, saved for the backward pass
        back(ones(3, 5))
        @test settle() == before      # the pullback ran: both let go (and the cotangent)
        Y, back = ChainRulesCore.rrule(f, A, B)
        @test settle() == before + 2
        back = nothing                # dropped uncalled
        @test settle() == before
        @test f(A, B) ≈ tanh.(B * A) && settle() == before  # a plain call keeps nothing
    end
end

if jl(Bool, "has", "jax")
    @testset "$FRONTEND: PyFunction over a jitted JAX function, through Zygote" begin
        f = PyFunction(adh("jax_function"))  # a jitted function says it is JAX's
        a, b = adh("data", 2, 6, 4, "float32"), adh("data", 3, 4, 2, "float32")
        A, B = owned(a), owned(b)
        @test f(A, B) ≈ 2 .* sin.(B * A)
        gA, gB = Zygote.gradient((x, w) -> sum(abs2, f(x, w)) / 2, A, B)
        want = adh("half_sum_of_squares_grads_jax", adh("jax_function"), adh("numpy_of", a), adh("numpy_of", b))
        want_a, want_b = owned_all(want, 2)
        @test gA ≈ want_a rtol = 1e-4
        @test gB ≈ want_b rtol = 1e-4
    end
end
