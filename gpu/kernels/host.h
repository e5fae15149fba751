/*
 * host.h: the shim that compiles decode.cu as host C, for testing the
 * kernels without a GPU (package gpu/internal/hostgrid). Kernels become
 * plain functions; the grid variables are thread-local globals that the
 * host runner sets before it calls a kernel once per thread of the grid.
 *
 * The kernels share no memory between the threads of a block and never
 * wait at a barrier, so running the threads one after the other gives the
 * results a GPU gives: within a launch every thread reads only what the
 * host or an earlier launch wrote, and writes bytes no other thread writes.
 */
#ifndef H5_HOST_H
#define H5_HOST_H

#define __global__
#define __device__
#define __constant__
#define __shared__

typedef struct {
	unsigned int x, y, z;
} h5_dim3;

extern _Thread_local h5_dim3 threadIdx, blockIdx, blockDim, gridDim;

#define H5_KERNEL void
#define H5_DEVICE static inline
#define H5_UNROLL

#endif
