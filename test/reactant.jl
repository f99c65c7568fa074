# Reactant arrays shared through ext/RsDLPackReactantExt.jl, with PythonCall: NumPy and PyTorch
# read a CPU array's XLA buffer in place, and torch with CUDA a GPU array's where Reactant has a
# CUDA client. Reactant is no test dependency (Reactant_jll is large): runtests.jl includes this
# file in its PythonCall process when the environment has Reactant, and records a skip
# otherwise; or run it directly in an environment that has RsDLPack, Reactant and PythonCall:
#
#     julia --project=ENV test/reactant.jl
#
# The README's Reactant lines are here, line for line (test/python/test_readme.py).

using Test: @test, @testset, @test_skip
using PythonCall: pyconvert, pyimport
using Reactant: Reactant, ConcreteRArray
using Reactant: ConcretePJRTArray, @jit
using RsDLPack: RsDLPack, from_dlpack, share, flush_releases, DLPackError, ReadOnlyArray

"Whether `name` imports in this Python (the tests that use it run only then)."
function importable(name)
    try
        pyimport(name)
        return true
    catch
        return false
    end
end

buffer_address(x) = UInt(Reactant.XLA.unsafe_buffer_pointer(Reactant.XLA.synced_buffer(only(x.data))))

"""
Releases what Python let go of, so that `RsDLPack.rooted_count` counts the live exports:
`flush_releases` unroots what was released before it runs the deleters that wait, which may
release more, so it runs twice.
"""
function collect_releases()
    GC.gc()
    pyimport("gc").collect()
    flush_releases()
    flush_releases()
end

double(a) = a .* 2

@testset "Reactant extension" begin
    extension = Base.get_extension(RsDLPack, :RsDLPackReactantExt)
    @test extension isa Module
    @test which(RsDLPack.array_device, (ConcretePJRTArray{Float32,2,1},)).module === extension
    # These tests make PJRT arrays: they run under Reactant's default runtime, where
    # ConcreteRArray is ConcretePJRTArray (the xla_runtime preference "IFRT" fails them here).
    @test Reactant.XLA.REACTANT_XLA_RUNTIME == "PJRT"
    @test ConcreteRArray === ConcretePJRTArray

    np = pyimport("numpy")
    cpu = Reactant.XLA.client("cpu")
    M = Float32[1 2 3; 4 5 6]

    @testset "a CPU buffer, zero-copy both ways" begin
        x = ConcretePJRTArray(M; client=cpu)
        n = share(x, np.from_dlpack)
        @test pyconvert(Tuple{Int,Int}, n.shape) == (2, 3)
        @test pyconvert(UInt, n.ctypes.data) == buffer_address(x)
        X = from_dlpack(n)
        @test X == M && UInt(pointer(X)) == buffer_address(x)
        n[0, 1] = 42                   # NumPy's write is in the buffer Reactant reads
        @test Array(x)[1, 2] == 42
        fill!(x, 7)                    # on the CPU Reactant writes the buffer in place
        @test pyconvert(Float32, n[1, 2]) == 7
        R = share(x, np.from_dlpack; order=:reversed)
        @test pyconvert(Tuple{Int,Int}, R.shape) == (3, 2) && pyconvert(Bool, R.flags.c_contiguous)
        O = share(ReadOnlyArray(x), np.from_dlpack)
        @test !pyconvert(Bool, O.flags.writeable)
    end

    @testset "a computed result, shared once its computation has finished" begin
        x = ConcretePJRTArray(M; client=cpu)
        y = @jit double(x)
        @test from_dlpack(share(y, np.from_dlpack)) == 2 .* M
    end

    @testset "the array and its buffers stay rooted until the consumer lets go" begin
        collect_releases()
        rooted = RsDLPack.rooted_count()
        x = ConcretePJRTArray(M; client=cpu)
        n = share(x, np.from_dlpack)
        @test RsDLPack.rooted_count() == rooted + 1
        x = nothing
        collect_releases()
        @test RsDLPack.rooted_count() == rooted + 1 && pyconvert(Float32, n[1, 2]) == M[2, 3]
        n = nothing
        collect_releases()
        @test RsDLPack.rooted_count() == rooted
    end

    @testset "refusals name the array and root nothing" begin
        collect_releases()
        rooted = RsDLPack.rooted_count()
        x = ConcretePJRTArray(M; client=cpu)
        err = try share(view(x, :, 1:2), np.from_dlpack); nothing catch e; e end
        @test err isa DLPackError && err.kind == :buffer && occursin("a view of a Reactant array", err.message)
        # A reshape is a Base.ReshapedArray over x, whose pointer Reactant does not give.
        err = try share(reshape(x, :), np.from_dlpack); nothing catch e; e end
        @test err isa DLPackError && err.kind == :buffer && occursin("a reshape of a Reactant array", err.message)
        z = ConcretePJRTArray(M; client=cpu)
        Reactant.mark_donated!(z)
        err = try share(z, np.from_dlpack); nothing catch e; e end
        @test err isa DLPackError && err.kind == :buffer && occursin("donated", err.message)
        @test RsDLPack.rooted_count() == rooted
    end

    @testset "the non-public Reactant names: all here, or named when one is missing" begin
        @test isempty(extension.MISSING)
        @test isempty(extension.missing_names(Reactant, ConcretePJRTArray))
        # A Reactant without them (a bare module, a struct without the fields): each is named.
        absent = extension.missing_names(Module(:Reactant), Tuple{Int})
        @test length(absent) == length(extension.NON_PUBLIC_NAMES) + length(extension.CONCRETE_PJRT_FIELDS)
        @test "Reactant.XLA.synced_buffer" in absent && "Tuple.donated (a field)" in absent
        # What share says then, before it roots anything.
        collect_releases()
        rooted = RsDLPack.rooted_count()
        push!(extension.MISSING, "Reactant.XLA.synced_buffer")
        try
            err = try share(ConcretePJRTArray(M; client=cpu), np.from_dlpack); nothing catch e; e end
            @test err isa DLPackError && err.kind == :buffer
            @test occursin("Reactant.XLA.synced_buffer", err.message) && occursin("Array(x)", err.message)
        finally
            empty!(extension.MISSING)
        end
        @test RsDLPack.rooted_count() == rooted
    end

    if importable("torch")
        torch = pyimport("torch")
        @testset "README (PyTorch, on the CPU)" begin
            Reactant.set_default_backend("cpu")
            x = ConcreteRArray(Float32[1 2 3; 4 5 6])   # on Reactant's default device
            t = share(x, torch.from_dlpack)        # a torch tensor of size (2, 3) over x's XLA buffer
            @test pyconvert(Tuple{Int,Int}, t.shape) == (2, 3)
            @test pyconvert(UInt, t.data_ptr()) == buffer_address(x)
            y = ConcreteRArray(from_dlpack(Matrix{Float32}, t))   # import: a copy into a new buffer
            @test Array(y) == M && buffer_address(y) != buffer_address(x)
        end

        gpu = try Reactant.XLA.client("cuda") catch; nothing end
        if gpu !== nothing && pyconvert(Bool, torch.cuda.is_available())
            @testset "a CUDA buffer, ordered by a host wait" begin
                g = ConcretePJRTArray(M; client=gpu)     # its upload may still be in flight
                t = share(g, torch.from_dlpack)
                @test pyconvert(String, t.device.type) == "cuda"
                @test pyconvert(UInt, t.data_ptr()) == buffer_address(g)
                @test pyconvert(Matrix{Float32}, t.cpu().numpy()) == M
                h = @jit double(g)
                u = share(h, torch.from_dlpack)
                @test pyconvert(Matrix{Float32}, u.cpu().numpy()) == 2 .* M
            end
        else
            @test_skip "no Reactant CUDA client, or torch sees no GPU: the CUDA share is untested here"
        end
    else
        @test_skip "torch is not importable here: the README's Reactant lines are untested"
    end
end
