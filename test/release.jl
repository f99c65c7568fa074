# Releases of imported NumPy arrays: the producer's deleter runs once (explicit release and
# garbage collection), and releases off the thread that holds the GIL wait in the queue for
# flush_releases. Included by runtests.jl inside its "$FRONTEND with NumPy" testset.

"Imports `a`, returns its refcount meanwhile, and drops the array on return."
@noinline function refcount_while_imported(a)
    B = from_dlpack(a)
    return GC.@preserve B refcount(a)
end

"What `f()` threw (or `:returned`), unless this task runs on `thread` (then `nothing`)."
function thrown_off_thread(f, thread)
    Threads.threadid() == thread && return nothing
    return try
        f()
        :returned
    catch e
        e
    end
end

"Releases `A` unless this task runs on `thread`; returns whether it did."
function release_off_thread(A, thread)
    Threads.threadid() == thread && return false
    RsDLPack.unsafe_free!(A)
    return true
end

@testset "the producer's deleter runs once" begin
    a = make("np.arange(6.0)")
    before = refcount(a)
    A = from_dlpack(a)
    @test refcount(a) > before
    RsDLPack.unsafe_free!(A)
    flush_releases()
    @test refcount(a) == before
    # Imported and dropped inside a function that has returned: a `let` binding at top
    # level may stay rooted (and the GC would then rightly keep the tensor).
    @test refcount_while_imported(a) > before
    GC.gc(); GC.gc()
    flush_releases()
    @test refcount(a) == before
    err = try from_dlpack(a; copy=false, order=:sideways); nothing catch e; e end
    @test err isa ArgumentError
    @test refcount(a) == before
end

@testset "releases off the Python thread are deferred" begin
    # The task must run on another thread than this one, which holds the GIL: the
    # scheduler may put a spawned task on any thread, so the task checks where it runs
    # and releases only there (a few tries; a visible skip if it never gets there).
    python_thread = Threads.threadid()
    a = make("np.arange(5.0)")
    before = refcount(a)
    A = from_dlpack(a)
    released_elsewhere = false
    for _ in 1:(Threads.nthreads() > 1 ? 100 : 0)  # one thread (PyCall's process): nowhere else to go
        released_elsewhere = fetch(Threads.@spawn release_off_thread(A, python_thread))
        released_elsewhere && break
    end
    if released_elsewhere
        @test RsDLPack.pending_releases() >= 1
        @test flush_releases() >= 1
        @test refcount(a) == before
    else
        @test_skip "no spawned task ran off the Python thread (julia --threads=$(Threads.nthreads()))"
        RsDLPack.unsafe_free!(A)
    end
end

@testset "calls off the Python thread throw instead of waiting for the GIL" begin
    # This thread holds the GIL for good: a spawned task's call that waited for it would hang
    # the `fetch` below. Each call throws at once instead, before it touches Python.
    python_thread = Threads.threadid()
    a = make("np.arange(3.0)")
    consumer = fn("np_from_dlpack")
    M = zeros(2)
    before, rooted = refcount(a), RsDLPack.rooted_count()
    calls = (("from_dlpack", () -> from_dlpack(a)), ("share", () -> share(M, consumer)),
             ("flush_releases", flush_releases))
    for (name, call) in calls
        thrown = nothing
        for _ in 1:(Threads.nthreads() > 1 ? 100 : 0)  # one thread (PyCall's process): nowhere else to go
            thrown = fetch(Threads.@spawn thrown_off_thread(call, python_thread))
            thrown === nothing || break
        end
        if thrown === nothing
            @test_skip "$name: no spawned task ran off the Python thread (julia --threads=$(Threads.nthreads()))"
        else
            @test thrown isa DLPackError && thrown.kind == :invalid
            @test occursin("does not hold Python's GIL", thrown.message) &&
                  occursin("PythonCall.GIL.lock", thrown.message)
        end
    end
    flush_releases()
    @test refcount(a) == before && RsDLPack.rooted_count() == rooted
end
