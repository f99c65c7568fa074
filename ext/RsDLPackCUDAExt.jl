# CUDA.jl 5.4-5.x for RsDLPack. CUDA.jl 6 is a meta-package over CUDACore, which loads with it
# and brings RsDLPackCUDACoreExt: there the methods come from that extension, and defining them
# here as well would overwrite them (an error while precompiling). The methods:
# ext/cuda_methods.jl.
module RsDLPackCUDAExt

using CUDA: CUDA

@static if !isdefined(CUDA, :CUDACore)
    using CUDA: CuArray, CuContext, CuPtr, CuStream
    include("cuda_methods.jl")
end

end # module
