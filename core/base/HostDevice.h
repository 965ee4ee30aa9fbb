// TESSERA_HD marks small inline functions shared by the CPU reference and CUDA kernels,
// so both compute the same arithmetic from one definition.
#pragma once
#if defined(__CUDACC__)
#define TESSERA_HD __host__ __device__ __forceinline__
#else
#define TESSERA_HD inline
#endif
