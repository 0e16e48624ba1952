// Marks functions shared verbatim by the C++ (CPU) and CUDA builds.
#pragma once

#if defined(__CUDACC__)
#define JN_HD __host__ __device__ __forceinline__
#else
#define JN_HD inline
#endif
