/* kernel_defs.h: PE_KFN marks element math that C and CUDA both compile.
 *
 * Every function in src/kernels/ is `PE_KFN`: static inline in C, and additionally
 * __host__ __device__ under nvcc, so the host backend and the CUDA kernels run the very
 * same math and the host tests check what the GPU computes.
 */
#ifndef PE_KERNELS_KERNEL_DEFS_H
#define PE_KERNELS_KERNEL_DEFS_H

#ifdef __CUDACC__
#define PE_KFN static inline __host__ __device__
#else
#define PE_KFN static inline
#endif

#endif
