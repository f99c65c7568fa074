# CUDA.jl 6 for RsDLPack, reached through CUDACore: CUDA.jl 6 moved CuArray, streams and the
# driver into the registered package CUDACore (CUDA is a meta-package over it), and array
# packages depend on CUDACore alone — an extension triggered by CUDA would never load for them.
# CUDA 6 loads CUDACore, so this extension serves its users too. The methods: ext/cuda_methods.jl.
module RsDLPackCUDACoreExt

using CUDACore: CUDACore, CuArray, CuContext, CuPtr, CuStream
const CUDA = CUDACore  # the name ext/cuda_methods.jl gives the package that holds CuArray

include("cuda_methods.jl")

end # module
