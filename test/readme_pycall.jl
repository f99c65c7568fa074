# The README's PyCall examples, line for line (test/python/test_readme.py fails when a README
# line is not found verbatim in the test files), each followed by what it claims. Included by
# runtests.jl in its PyCall process, after NumPy was found importable.
module ReadmePyCall

using Test: @test, @testset
using RsDLPack
using PyCall: PyObject, pycall, pyimport

@testset "README examples (PyCall)" begin
    np = pyimport("numpy")
    a = pycall(np.arange, PyObject, 12.0)
    @test a isa PyObject
    A = from_dlpack(a)
    @test A == 0:11 && UInt(pointer(A)) == UInt(convert(Int, a."ctypes"."data"))
    n = share(A, np.from_dlpack)
    @test n isa PyObject && convert(Int, n."ctypes"."data") == convert(Int, a."ctypes"."data")
    e = share(A, PyObject)
    @test e isa PyObject && hasproperty(e, "__dlpack__")
end

end # module ReadmePyCall
