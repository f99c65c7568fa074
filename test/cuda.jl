# GPU tests of the CUDA extension, through PythonCall and PyTorch with CUDA. Included by
# runtests.jl (in its PythonCall process; CUDA.jl is a test dependency); or run directly in an
# environment that has RsDLPack, CUDA and PythonCall (a functional GPU and torch with CUDA are
# required; without them the file records a skipped test and says why):
#
#     julia --project=ENV test/cuda.jl

using Test: @test, @testset, @test_skip
using CUDA: CuArray
using CUDA: CUDA, CuStream
using PythonCall: Py, PyException, pyconvert, pyhasattr, pyimport, pylist
using PythonCall: pywith
using RsDLPack: RsDLPack, from_dlpack, share, unsafe_cuda_stream, DLPackError, ReadOnlyArray
using RsDLPack: PyFunction, torch_layer
using LuxCore: LuxCore
using Random: Random
using Zygote: Zygote
using StridedViews: StridedView

"Whether torch imports and sees a GPU (false when torch is not installed)."
function has_torch_cuda()
    try
        return pyconvert(Bool, pyimport("torch").cuda.is_available())
    catch e
        e isa PyException || rethrow()
        return false
    end
end

"A plan of `kind` for a 2×3 Float32 tensor on CUDA device 0 that holds no tensor (a null handle)."
function cuda_plan(kind::UInt8)
    padded(t) = ntuple(k -> k <= length(t) ? Int64(t[k]) : Int64(0), RsDLPack.MAX_NDIM)
    return RsDLPack.ArrayPlan(C_NULL, UInt(0), Int64(2), padded((2, 3)), padded((2, 3)), padded((1, 1)),
                              padded((1, 1)), padded((2, 3)), padded((1, 2)), RsDLPack.element_code(Float32),
                              RsDLPack.KDLCUDA, Int32(0), kind, 0x00, 0x00, 0x00)
end

# Wherever CUDA.jl loads, GPU or not: the core plans CUDA targets as views or empty results only;
# any other kind is an internal error, never an uninitialised CuArray (nothing is allocated).
@testset "a CUDA plan that is neither a view nor empty is an internal error" begin
    for T in (CuArray, CuArray{Float32,2})
        err = try RsDLPack.wrap_imported(T, cuda_plan(RsDLPack.PLAN_KIND_COPY), RsDLPack.TensorOwner(C_NULL)); nothing catch e; e end
        @test err isa DLPackError && err.kind == :internal && occursin("please report", err.message)
    end
end

# Wherever CUDA.jl loads, GPU or not: a Python int reaches the CUDA extension as an integer (the
# default-stream aliases are refused before the driver is asked).
@testset "unsafe_cuda_stream takes a Python int" begin
    err = try unsafe_cuda_stream(Py(1)); nothing catch e; e end
    @test err isa DLPackError && occursin("default-stream alias", err.message)
end

# CUDA.jl 6 loads CUDACore, whose extension defines the methods; CUDA.jl 5 has no CUDACore, and
# the CUDA extension defines them (ext/RsDLPackCUDAExt.jl).
@testset "the CUDA extension for this CUDA.jl" begin
    expected = isdefined(CUDA, :CUDACore) ? :RsDLPackCUDACoreExt : :RsDLPackCUDAExt
    extension = Base.get_extension(RsDLPack, expected)
    @test extension isa Module
    @test which(RsDLPack.plan_target, (Type{CuArray{Float32,2}},)).module === extension
    @test RsDLPack.plan_target(CuArray{Float32,2}) == RsDLPack.TARGET_CUDA_ARRAY
end

if !CUDA.functional()
    @info "CUDA is not functional here: test/cuda.jl skipped"
    @testset "CUDA extension" begin
        @test_skip "CUDA.functional() is false"
    end
elseif !has_torch_cuda()
    @info "torch with CUDA is not importable here: test/cuda.jl skipped"
    @testset "CUDA extension" begin
        @test_skip "torch.cuda.is_available() is false (or torch is missing)"
    end
else
    torch = pyimport("torch")
    @testset "CUDA extension" begin
        @testset "import a torch CUDA tensor zero-copy" begin
            t = torch.arange(6, dtype=torch.float32, device="cuda").reshape(2, 3)
            A = from_dlpack(CuArray, t)
            @test size(A) == (2, 3)
            @test reinterpret(UInt, pointer(parent(A))) == pyconvert(UInt, t.data_ptr())
            @test Array(A) == Float32[0 1 2; 3 4 5]
            CUDA.@allowscalar A[1, 2] = 42  # written on the task-local stream, seen by torch after a sync
            CUDA.synchronize()
            @test pyconvert(Float64, t[0, 1].item()) == 42
            # unsafe_free! also waits for the task's stream, views included (test/gpu/check_gpu.py
            # proves the ordering against torch's allocator).
            @test RsDLPack.release_stream(view(A, :, 1)) == RsDLPack.release_stream(A) != -1
            # ... whose CuStream stays rooted until the release has recorded there.
            @test RsDLPack.release_stream_keeper(view(A, :, 1)) === CUDA.stream()
            rooted = RsDLPack.rooted_count()
            RsDLPack.unsafe_free!(A)
            @test RsDLPack.rooted_count() < rooted  # both streams' roots came back (the import's and the caller's)
        end
        @testset "an importing task's stream stays rooted until the release records on it" begin
            t = torch.arange(6, dtype=torch.float32, device="cuda")
            GC.gc(true)  # roots earlier tests let go of (a collected layer's kept tensors) come back first
            RsDLPack.flush_releases()
            before = RsDLPack.rooted_count()
            # Imported on that task's own stream; the task then ends, and only the array's
            # release still needs the stream (CUDA.jl's finalizer would destroy it).
            A = fetch(@async from_dlpack(CuArray, t))
            @test RsDLPack.rooted_count() == before + 1
            GC.gc(true)
            @test Array(A) == Float32[0, 1, 2, 3, 4, 5]
            A = nothing
            GC.gc(true)  # the finalizer records the release's event, then gives the root back
            RsDLPack.flush_releases()
            @test RsDLPack.rooted_count() == before
        end
        @testset "an empty plan is a fresh CuArray" begin
            empty = cuda_plan(RsDLPack.PLAN_KIND_EMPTY)
            E = RsDLPack.wrap_imported(CuArray, empty, RsDLPack.TensorOwner(C_NULL))
            @test E isa CuArray{Float32,2} && size(E) == (2, 3)
            @test RsDLPack.wrap_imported(CuArray{Float32,2}, empty, RsDLPack.TensorOwner(C_NULL)) isa CuArray{Float32,2}
        end
        @testset "pyconvert(CuArray, t) answers a CuArray or declines" begin
            c = torch.arange(6, dtype=torch.float32, device="cuda")
            V = pyconvert(CuArray, c)  # dense: the tensor's memory
            @test V isa CuArray{Float32,1} && reinterpret(UInt, pointer(V)) == pyconvert(UInt, c.data_ptr())
            @test pyconvert(CuArray{Float32,1}, c) isa CuArray{Float32,1}
            # Row-major 2×3: a CuArray in the producer's order would need a device copy, which the
            # core does not make; declined (the view is released at once), never a PermutedDimsArray.
            t = c.reshape(2, 3)
            @test pyconvert(CuArray, t, nothing) === nothing
            @test pyconvert(CuArray{Float32,2}, t, nothing) === nothing
            h = pyconvert(CuArray, torch.zeros(2), nothing)  # a host tensor: declined, or torch's device copy
            @test h === nothing || h isa CuArray{Float32,1}
            @test pyconvert(AbstractArray, t) isa PermutedDimsArray{Float32,2,<:Any,<:Any,<:CuArray}
            p = torch.nn.Parameter(torch.zeros(2, device="cuda"))
            @test !(pyconvert(Any, p) isa AbstractArray)   # requires grad: declined, PythonCall's answer stands
            @test pyconvert(CuArray, p, nothing) === nothing
        end
        @testset "typed CuArray forms" begin
            t = torch.arange(6, dtype=torch.float32, device="cuda").reshape(2, 3)
            # Not `@inferred`: CUDA.jl's unsafe_wrap(CuArray, ::CuPtr, dims) picks the memory type
            # parameter at run time (memory_type(ptr)), so the result is a CuArray{Float32,2,M}
            # whose M inference cannot know.
            R = from_dlpack(CuArray{Float32,2}, t; order=:reversed)
            @test R isa CuArray{Float32,2}
            @test size(R) == (3, 2) && reinterpret(UInt, pointer(R)) == pyconvert(UInt, t.data_ptr())
            # Row-major in the producer's order would need a copy, which is host-only: refused.
            err = try from_dlpack(CuArray{Float32,2}, t); nothing catch e; e end
            @test err isa DLPackError && occursin("copies on the host only", err.message)
            err = try from_dlpack(CuArray{Float64,2}, t); nothing catch e; e end
            @test err isa DLPackError && occursin("not the requested Float64", err.message)
            RsDLPack.unsafe_free!(R)
            # A read-only tensor: CuArray{T,N} has no read-only form, so even readonly=true
            # throws (the core decides), and copy=true is refused (no device copies); the
            # untyped form wraps it read-only.
            dlpack = pyimport("torch.utils.dlpack")
            if pyhasattr(dlpack, "ReadOnlyTensorWrapper")
                ro = dlpack.ReadOnlyTensorWrapper(torch.arange(4, dtype=torch.float32, device="cuda"))
                err = try from_dlpack(CuArray{Float32,1}, ro; readonly=true); nothing catch e; e end
                @test err isa DLPackError && err.kind == :buffer && occursin("no read-only form", err.message)
                err = try from_dlpack(CuArray{Float32,1}, ro; readonly=true, copy=true); nothing catch e; e end
                @test err isa DLPackError && err.kind == :buffer
                U = from_dlpack(CuArray, ro; readonly=true)
                @test U isa ReadOnlyArray && size(U) == (4,)
                RsDLPack.unsafe_free!(U)
            else
                @test_skip "this torch has no torch.utils.dlpack.ReadOnlyTensorWrapper"
            end
        end
        @testset "a StridedView with a CuArray parent: a broadcast, zero-copy both ways" begin
            t = torch.arange(4.0, device="cuda").expand(3, 4)
            S = from_dlpack(StridedView{Float32,2,<:CuArray}, t)
            @test S isa StridedView{Float32,2} && parent(S) isa CuArray{Float32,1}
            @test length(parent(S)) == 4 && strides(S) == (0, 1) && size(S) == (3, 4)
            @test reinterpret(UInt, pointer(parent(S))) == pyconvert(UInt, t.data_ptr())
            @test CUDA.@allowscalar(S[3, 2]) == 1
            @test RsDLPack.release_stream(S) != -1  # unsafe_free! waits for the task's stream too
            u = share(S, torch.from_dlpack)
            @test pyconvert(UInt, u.data_ptr()) == pyconvert(UInt, t.data_ptr())
            @test pyconvert(Vector{Int}, pylist(u.stride())) == [0, 1]
            @test pyconvert(Bool, torch.equal(u, t))
            u = nothing
            RsDLPack.unsafe_free!(S)
        end
        @testset "share a CuArray with torch" begin
            M = CuArray(Float32.(reshape(1:6, 2, 3)))
            u = share(M, torch.from_dlpack)
            @test pyconvert(UInt, u.data_ptr()) == reinterpret(UInt, pointer(M))
            @test pyconvert(Vector{Int}, pylist(u.shape)) == [2, 3]
            @test pyconvert(Float64, u[1, 2].item()) == 6
            # The task's stream is rooted with the array, and each __dlpack__ records on it:
            # a write between the share and the consumer's call is ordered before it too.
            @test RsDLPack.share_flags(M) == RsDLPack.SHARE_STREAM_KEPT
            e = share(M, Py)
            M .= 7
            v = torch.from_dlpack(e)
            @test pyconvert(Float64, v.sum().item()) == 42
        end
        @testset "the README's CUDA example" begin
            t = torch.arange(6, device="cuda").reshape(2, 3)
            A = from_dlpack(CuArray, t)
            @test size(A) == (2, 3) && Array(A) == [0 1 2; 3 4 5]  # a PermutedDimsArray of a CuArray
            u = share(CuArray(rand(Float32, 4)), torch.from_dlpack)
            @test pyconvert(Bool, u.is_cuda) && pyconvert(Int, u.numel()) == 4
            s = unsafe_cuda_stream(torch.cuda.current_stream().cuda_stream)
            @test s isa CuStream
            RsDLPack.unsafe_free!(A)
        end
        @testset "the README's PyTorch model on the GPU" begin
            X = rand(Float32, 4, 16)
            gpu_model = torch.nn.Linear(4, 2).to("cuda")
            Xd = CuArray(X)
            Yd = pywith(torch.no_grad()) do _
                from_dlpack(CuArray, gpu_model(share(Xd, torch.from_dlpack; order=:reversed)); order=:reversed)
            end
            weight = pyconvert(Matrix{Float32}, gpu_model.weight.detach().cpu().numpy())
            bias = pyconvert(Vector{Float32}, gpu_model.bias.detach().cpu().numpy())
            @test Yd isa CuArray{Float32,2} && size(Yd) == (2, 16)
            @test Array(Yd) ≈ weight * X .+ bias
        end
        @testset "unsafe_cuda_stream wraps torch's stream" begin
            ts = torch.cuda.Stream()
            s = unsafe_cuda_stream(pyconvert(UInt, ts.cuda_stream))
            @test s isa CuStream
            # CUDA.CUstream is not public in CUDA.jl 6: the handle type comes from the struct.
            @test UInt(Base.unsafe_convert(fieldtype(CuStream, :handle), s)) == pyconvert(UInt, ts.cuda_stream)
            @test getfield(s, :ctx) == CUDA.context()  # the context the driver reported
            err = try unsafe_cuda_stream(1); nothing catch e; e end
            @test err isa DLPackError && occursin("default-stream alias", err.message)
        end
        @testset "a torch CUDA MLP differentiated from Julia (torch_layer, PyFunction)" begin
            torch.manual_seed(0)
            mlp = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4)).cuda()
            model = torch_layer(mlp)
            ps, st = LuxCore.setup(Random.default_rng(), model)
            @test ps[Symbol("0.weight")] isa CuArray{Float32,2} && size(ps[Symbol("0.weight")]) == (8, 32)
            x = CUDA.zeros(Float32, 8, 256)
            x .= CuArray(reshape(Float32.(1:8*256) ./ 2048, 8, 256))  # Julia's write, on its task stream
            (g,) = Zygote.gradient(p -> sum(abs2, first(model(x, p, st))) / 2, ps)
            @test g[Symbol("0.weight")] isa CuArray{Float32,2}
            # torch's own gradient on the same numbers (x read after Julia's write: else these differ).
            xt = share(x, torch.from_dlpack; order=:reversed)
            (mlp(xt)^2).sum().div(2).backward()
            for (k, name) in enumerate(keys(g))
                want = from_dlpack(CuArray, pylist(mlp.parameters())[k - 1].grad; order=:reversed)
                @test isapprox(Array(g[name]), Array(want); rtol=1e-4)
            end
            f = PyFunction(torch.tanh)
            (gx,) = Zygote.gradient(z -> sum(f(z)), x)
            @test gx isa CuArray{Float32,2} && isapprox(Array(gx), 1 .- tanh.(Array(x)) .^ 2; rtol=1e-4)
        end
    end
end
