# docs/src/autodiff.md's examples, line for line (test/python/test_readme.py fails when a line of
# that page is not found verbatim in the test files), each followed by what it claims. Included
# by runtests.jl in its PythonCall process; runs where torch (and, for its last part, JAX) is
# installed, and records a skip elsewhere.
module AutodiffExample

using Test: @test, @testset, @test_skip
using RsDLPack, PythonCall, LuxCore, Optimisers, Zygote, Random

"Whether a Python module imports here."
function has(name)
    try
        pyimport(name)
        return true
    catch
        return false
    end
end

@testset "docs/src/autodiff.md examples (PythonCall)" begin
    if !has("torch")
        @test_skip "torch is not importable from this Python: docs/src/autodiff.md's examples not run"
    else
        torch = pyimport("torch")
        nn = torch.nn
        torch.manual_seed(0)
        mlp = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 3))
        model = torch_layer(mlp)
        ps, st = LuxCore.setup(Random.default_rng(), model)
        @test size(ps[Symbol("0.weight")]) == (4, 16)   # torch's 16×4 weight, as Julia's (in, out)

        x = randn(Float32, 4, 64)                          # 4 features × 64 samples
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

        ps0, _ = LuxCore.setup(Random.default_rng(), model)   # the module's own parameters again
        (g0,) = Zygote.gradient(loss, ps0)
        xt, yt = share(x, torch.from_dlpack; order=:reversed), share(y, torch.from_dlpack; order=:reversed)
        ((mlp(xt) - yt)^2).sum().div(2).backward()
        W = from_dlpack(mlp[0].weight.grad; order=:reversed)
        @test g0[Symbol("0.weight")] ≈ W rtol = 1e-4

        f = PyFunction(torch.nn.functional.softplus)
        X = randn(3, 5)
        (gX,) = Zygote.gradient(X -> sum(f(X)), X)
        @test gX ≈ 1 ./ (1 .+ exp.(-X))
    end
    if !has("jax")
        @test_skip "JAX is not importable from this Python: docs/src/autodiff.md's JAX example not run"
    else
        jax = pyimport("jax")
        jnp = pyimport("jax.numpy")
        g = PyFunction(jax.jit(jnp.tanh))
        Z = randn(Float32, 8, 8)
        (gZ,) = Zygote.gradient(Z -> sum(g(Z)), Z)
        @test gZ ≈ 1 .- tanh.(Z) .^ 2 rtol = 1e-4
    end
end

end # module AutodiffExample
