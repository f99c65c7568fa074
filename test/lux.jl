# The Lux layer over a torch nn.Module (`torch_layer`, ext/RsDLPackLuxCoreExt.jl): parameters by
# name as Julia's own arrays, buffers as state, the module's train/eval modes, gradients equal to
# torch's own, and a training loop with Optimisers whose loss falls. Included by runtests.jl
# after autodiff.jl (whose helpers it uses), in each front-end's process. docs/src/autodiff.md's
# example is this file's first testset, line for line (test/python/test_readme.py).

using LuxCore: LuxCore
using Optimisers: Optimisers
using Random: Random

if jl(Bool, "has", "torch")
    @testset "$FRONTEND: a torch MLP trained from Julia with Lux, Optimisers and Zygote" begin
        model = torch_layer(adh("mlp", 0))  # Linear(4 => 16), Tanh, Linear(16 => 3)
        ps, st = LuxCore.setup(Random.default_rng(), model)
        x = randn(Float32, 4, 64)  # 4 features × 64 samples
        y = Float32[1 -1 0 2; 0 1 -1 0; 1 1 1 1] * x ./ 2  # a target the MLP can learn
        loss(p) = sum(abs2, first(model(x, p, st)) .- y) / 2
        opt = Optimisers.setup(Optimisers.Adam(0.01f0), ps)
        losses = Float32[]
        for step in 1:50
            l, (g,) = Zygote.withgradient(loss, ps)
            push!(losses, l)
            opt, ps = Optimisers.update!(opt, ps, g)
        end
        @test losses[end] < 0.2 * losses[1]

        # The same MLP's gradient, equal to torch's own.
        fresh = adh("mlp", 0)
        ps0, _ = LuxCore.setup(Random.default_rng(), torch_layer(fresh))
        (g0,) = Zygote.gradient(loss, ps0)
        want = adh("module_grads", fresh, share(x, fn("torch_from_dlpack"); order=:reversed),
                   share(y, fn("torch_from_dlpack"); order=:reversed))
        @test keys(g0) == (Symbol("0.weight"), Symbol("0.bias"), Symbol("2.weight"), Symbol("2.bias"))
        wants = owned_all(want, 5)  # the four parameters' gradients, then x's
        @test all(k -> isapprox(g0[k], wants[k]; rtol=1e-4), 1:4)
    end

    @testset "$FRONTEND: torch_layer's parameters, buffers and modes" begin
        # Julia sets a Linear layer's weights: its (in, out) W is torch's (out, in) weight.
        lin = torch_layer(adh("linear", 3, 2))
        ps, st = LuxCore.setup(Random.default_rng(), lin)
        @test keys(ps) == (:weight, :bias) && size(ps.weight) == (3, 2) && st.buffers == NamedTuple()
        W = Float32[1 2; 3 4; 5 6]
        x = Float32.(reshape(1:12, 3, 4))
        y, _ = lin(x, (weight=W, bias=Float32[10, 20]), st)
        @test y ≈ W' * x .+ Float32[10, 20]
        # Parameters by name, in any order.
        @test first(lin(x, (bias=Float32[10, 20], weight=W), st)) ≈ y
        err = try lin(x, (w=W, b=Float32[10, 20]), st); nothing catch e; e end
        @test err isa ArgumentError && occursin("(:weight, :bias)", err.msg)

        # A module with buffers: batch-norm statistics are the state, updated in training mode.
        bn = torch_layer(adh("batch_norm_net", 0))
        ps, st = LuxCore.setup(Random.default_rng(), bn)
        @test keys(st.buffers) == (Symbol("1.running_mean"), Symbol("1.running_var"), Symbol("1.num_batches_tracked"))
        @test st.training === Val(true) && st.buffers[Symbol("1.running_mean")] == zeros(Float32, 5)
        x = randn(Float32, 3, 8)
        y, st2 = bn(x, ps, st)
        @test size(y) == (5, 8) && st2.buffers[Symbol("1.num_batches_tracked")][] == 1
        @test st2.buffers[Symbol("1.running_mean")] != zeros(Float32, 5)
        @test st.buffers[Symbol("1.running_mean")] == zeros(Float32, 5)  # Julia's state was not written
        # testmode: eval, the running statistics used and kept.
        st3 = LuxCore.testmode(st2)
        @test st3.training === Val(false)
        y3, st4 = bn(x, ps, st3)
        @test st4.buffers[Symbol("1.num_batches_tracked")][] == 1
        @test st4.buffers[Symbol("1.running_mean")] == st2.buffers[Symbol("1.running_mean")]
        @test !(y3 ≈ y)
        # Gradients through batch norm in training mode, equal to torch's.
        fresh = adh("batch_norm_net", 0)
        ps, st = LuxCore.setup(Random.default_rng(), torch_layer(fresh))
        target = zeros(Float32, 5, 8)
        (gp, gx) = Zygote.gradient((p, z) -> sum(abs2, first(bn(z, p, st)) .- target) / 2, ps, x)
        want = adh("module_grads", fresh, share(x, fn("torch_from_dlpack"); order=:reversed),
                   share(target, fn("torch_from_dlpack"); order=:reversed))
        wants = owned_all(want, 5)
        @test all(k -> isapprox(gp[k], wants[k]; rtol=1e-4), 1:4) && isapprox(gx, wants[5]; rtol=1e-4)
    end

    @testset "$FRONTEND: torch_layer keeps its parameters' tensors while the same arrays come" begin
        lin = torch_layer(adh("linear", 3, 2))
        ps, st = LuxCore.setup(Random.default_rng(), lin)
        x = Float32.(reshape(1:12, 3, 4))
        before = settle()
        y, _ = lin(x, ps, st)
        @test y ≈ ps.weight' * x .+ ps.bias
        @test settle() == before + 2  # weight and bias kept for the next call; x let go
        ps.weight .*= 2               # written in place, as Optimisers.update! writes it
        ps.bias .+= 1
        y, _ = lin(x, ps, st)
        @test y ≈ ps.weight' * x .+ ps.bias && settle() == before + 2
        # Gradients with respect to kept parameters.
        (gp,) = Zygote.gradient(p -> sum(first(lin(x, p, st))), ps)
        @test gp.weight ≈ x * ones(Float32, 4, 2) && gp.bias ≈ fill(4.0f0, 2)
        # New arrays in their place are shared anew, and the kept ones let go.
        ps2 = map(copy, ps)
        ps2.bias .= 0
        y, _ = lin(x, ps2, st)
        @test y ≈ ps2.weight' * x && settle() == before + 2
    end
end
