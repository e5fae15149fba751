/*
 * device.h: the shim that lets clang compile decode.cu for the GPU without
 * the CUDA toolkit's headers (clang++-16 --cuda-device-only -nocudainc
 * -nocudalib -include device.h). It defines the few CUDA keywords the
 * kernels use, and H5_KERNEL, the unmangled entry point the driver looks up
 * by name.
 */
#ifndef H5_DEVICE_H
#define H5_DEVICE_H

#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __constant__ __attribute__((constant))
#define __shared__ __attribute__((shared))

#include <__clang_cuda_builtin_vars.h> /* threadIdx, blockIdx, blockDim, gridDim */

#define H5_KERNEL extern "C" __global__ void
#define H5_DEVICE static __device__ __attribute__((always_inline)) inline
#define H5_UNROLL _Pragma("unroll")

#endif
