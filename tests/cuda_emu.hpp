/* cuda_emu.hpp: a CPU emulation of CUDA blocks, threads and warps, so that the real decoder
 * grids (src/backend/cuda/cb_decoder.cu, cb_attention.cu, cb_sample.cu, compiled as C++ with
 * this header included first) run in test_cuda_emu without a GPU.
 *
 * Every CUDA thread of a block is a fiber (ucontext stacks, switched with _setjmp/_longjmp);
 * the blocks of a grid run one after the other on the calling thread. __syncthreads waits for
 * every live thread of the block, a warp primitive (shuffles, ballot, match, __syncwarp) for
 * every live lane of the warp; the fibers run in an order shuffled at every barrier, so a
 * missing barrier shows as a wrong result more often than in a fixed order. __shared__ is
 * `static` (one block at a time). Atomics are plain read-modify-writes (fibers never
 * preempt each other). What it cannot show: the GPU's memory model, races between blocks,
 * warp-synchronous code that relies on lock-step execution without a primitive, launch
 * limits (shared memory, registers), and the device's own expf/sinf (the host's run here).
 */
#ifndef PE_CUDA_EMU_HPP
#define PE_CUDA_EMU_HPP

#define PE_CUDA_EMU 1
#define __shared__ static
#define __launch_bounds__(...)

#include <cuda_runtime_api.h>
#include <vector_functions.h>

#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include <functional>
#include <tuple>
#include <vector>

namespace emu {

struct Dim {
    unsigned x, y, z;
};

constexpr size_t kStack = 64 * 1024;

struct Fiber {
    ucontext_t uc;  /* used once, to start the fiber on its stack */
    jmp_buf jb;     /* where the fiber resumes */
    char *stack;
    bool done;
};

struct State {
    std::vector<Fiber> f;
    jmp_buf sched;
    int cur, nthreads, live;
    Dim block, grid, bdim;
    const std::function<void()> *body;
    /* block barrier */
    int bar_count;
    unsigned bar_gen;
    /* warp barriers and the lanes' exchange slots */
    int wcount[32];
    unsigned wgen[32];
    uint64_t slot[32][32];
    /* __match_any_sync: a barrier of the lanes of its mask only */
    int mcount[32];
    unsigned mgen[32];
    uint64_t mslot[32][32];
    uint64_t rng;
};

inline State &st()
{
    static State s;
    return s;
}

inline void yield()
{
    State &s = st();
    if (!_setjmp(s.f[(size_t)s.cur].jb))
        _longjmp(s.sched, 1);
}

inline void fiber_main()
{
    State &s = st();
    (*s.body)();
    s.f[(size_t)s.cur].done = true;
    s.live--;
    _longjmp(s.sched, 1);
}

/* The lanes of warp w that have not exited. */
inline int warp_live(int w)
{
    State &s = st();
    int n = 0;
    for (int l = 0; l < 32 && w * 32 + l < s.nthreads; l++)
        n += !s.f[(size_t)(w * 32 + l)].done;
    return n;
}

inline void sync_block()
{
    State &s = st();
    unsigned g = s.bar_gen;
    if (++s.bar_count >= s.live) {
        s.bar_count = 0;
        s.bar_gen++;
        return;
    }
    while (s.bar_gen == g)
        yield();
}

inline void sync_warp()
{
    State &s = st();
    int w = s.cur / 32;
    unsigned g = s.wgen[w];
    if (++s.wcount[w] >= warp_live(w)) {
        s.wcount[w] = 0;
        s.wgen[w]++;
        return;
    }
    while (s.wgen[w] == g)
        yield();
}

/* Runs fiber t until it yields or ends (first: start it on its stack). */
__attribute__((noinline)) inline void resume(int t, bool first)
{
    State &s = st();
    s.cur = t;
    if (!_setjmp(s.sched)) {
        if (first) {
            ucontext_t here;
            swapcontext(&here, &s.f[(size_t)t].uc); /* never returns: the fiber longjmps */
        } else {
            _longjmp(s.f[(size_t)t].jb, 1);
        }
    }
}

/* Runs body on every thread of every block. */
inline void run(unsigned blocks, int threads, const std::function<void()> &body)
{
    State &s = st();
    if (threads < 1 || threads > 1024 || threads % 32)
        abort(); /* the grids here launch whole warps only */
    s.nthreads = threads;
    s.body = &body;
    s.grid = Dim{blocks, 1, 1};
    s.bdim = Dim{(unsigned)threads, 1, 1};
    if (s.f.size() < (size_t)threads) {
        size_t old = s.f.size();
        s.f.resize((size_t)threads);
        for (size_t t = old; t < s.f.size(); t++)
            s.f[t].stack = static_cast<char *>(malloc(kStack));
    }
    if (!s.rng)
        s.rng = 0x9E3779B97F4A7C15ull;
    std::vector<int> order((size_t)threads);
    for (unsigned b = 0; b < blocks; b++) {
        s.block = Dim{b, 0, 0};
        s.live = threads;
        s.bar_count = 0;
        memset(s.wcount, 0, sizeof s.wcount);
        memset(s.mcount, 0, sizeof s.mcount);
        for (int t = 0; t < threads; t++) {
            Fiber &f = s.f[(size_t)t];
            f.done = false;
            getcontext(&f.uc);
            f.uc.uc_stack.ss_sp = f.stack;
            f.uc.uc_stack.ss_size = kStack;
            f.uc.uc_link = NULL;
            makecontext(&f.uc, fiber_main, 0);
        }
        std::vector<bool> started((size_t)threads, false);
        while (s.live > 0) {
            for (int t = 0; t < threads; t++)
                order[(size_t)t] = t;
            for (int t = threads - 1; t > 0; t--) { /* a shuffled round */
                s.rng ^= s.rng << 13;
                s.rng ^= s.rng >> 7;
                s.rng ^= s.rng << 17;
                int j = (int)(s.rng % (uint64_t)(t + 1));
                int x = order[(size_t)t];
                order[(size_t)t] = order[(size_t)j];
                order[(size_t)j] = x;
            }
            for (int k = 0; k < threads; k++) {
                int t = order[(size_t)k];
                if (s.f[(size_t)t].done)
                    continue;
                resume(t, !started[(size_t)t]);
                started[(size_t)t] = true;
            }
        }
    }
}

template <class T> inline uint64_t bits(T v)
{
    uint64_t u = 0;
    memcpy(&u, &v, sizeof v);
    return u;
}

template <class T> inline T from_bits(uint64_t u)
{
    T v;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* Every lane publishes v; returns lane src's value. */
template <class T> inline T exchange(T v, int src)
{
    State &s = st();
    int w = s.cur / 32, lane = s.cur % 32;
    s.slot[w][lane] = bits(v);
    sync_warp();
    T r = from_bits<T>(s.slot[w][src]);
    sync_warp();
    return r;
}

inline unsigned lane_now() { return (unsigned)(st().cur % 32); }

} /* namespace emu */

/* ---- the device side's built-ins ---- */

#define threadIdx (emu::Dim{(unsigned)emu::st().cur, 0, 0})
#define blockIdx (emu::st().block)
#define blockDim (emu::st().bdim)
#define gridDim (emu::st().grid)

inline void __syncthreads() { emu::sync_block(); }
inline void __syncwarp(unsigned mask = 0xffffffffu)
{
    (void)mask;
    emu::sync_warp();
}

template <class T> inline T __shfl_xor_sync(unsigned mask, T v, int o)
{
    (void)mask;
    return emu::exchange(v, (int)(emu::lane_now() ^ (unsigned)o));
}

template <class T> inline T __shfl_up_sync(unsigned mask, T v, unsigned o)
{
    (void)mask;
    int lane = (int)emu::lane_now(), src = lane - (int)o;
    T r = emu::exchange(v, src < 0 ? lane : src);
    return r;
}

template <class T> inline T __shfl_sync(unsigned mask, T v, int src)
{
    (void)mask;
    return emu::exchange(v, src & 31);
}

inline unsigned __ballot_sync(unsigned mask, int pred)
{
    (void)mask;
    emu::State &s = emu::st();
    int w = s.cur / 32, lane = s.cur % 32;
    s.slot[w][lane] = pred ? 1 : 0;
    emu::sync_warp();
    unsigned m = 0;
    for (int l = 0; l < 32 && w * 32 + l < s.nthreads; l++)
        if (!s.f[(size_t)(w * 32 + l)].done && s.slot[w][l])
            m |= 1u << l;
    emu::sync_warp();
    return m;
}

/* Lanes outside mask do not call (the grids call it under the condition that built mask). */
inline unsigned __match_any_sync(unsigned mask, int v)
{
    emu::State &s = emu::st();
    int w = s.cur / 32, lane = s.cur % 32;
    unsigned m = 0;
    s.mslot[w][lane] = (uint64_t)(uint32_t)v;
    const int need = __builtin_popcount(mask);
    for (int round = 0; round < 2; round++) { /* publish, read, then leave together */
        if (round == 1)
            for (int l = 0; l < 32; l++)
                if ((mask >> l) & 1u && s.mslot[w][l] == s.mslot[w][lane])
                    m |= 1u << l;
        unsigned g = s.mgen[w];
        if (++s.mcount[w] >= need) {
            s.mcount[w] = 0;
            s.mgen[w]++;
        } else {
            while (s.mgen[w] == g)
                emu::yield();
        }
    }
    return m;
}

inline int __ffs(unsigned x) { return __builtin_ffs((int)x); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline unsigned __float_as_uint(float x) { return (unsigned)emu::bits(x); }
inline float __uint_as_float(unsigned u) { return emu::from_bits<float>(u); }

template <class T> inline T atomicAdd(T *p, T v)
{
    T old = *p;
    *p = old + v;
    return old;
}
inline int atomicMin(int *p, int v)
{
    int old = *p;
    *p = v < old ? v : old;
    return old;
}

/* cb::launch of cb_grid.cuh, emulated: every thread of every block calls k(args...). */
namespace cb {
template <class... P, class... A>
inline cudaError_t launch(void (*k)(P...), unsigned blocks, int threads, cudaStream_t s,
                          A... args)
{
    (void)s;
    std::tuple<P...> a(args...);
    emu::run(blocks, threads, [&] { std::apply(k, a); });
    return cudaSuccess;
}
} /* namespace cb */

#endif
