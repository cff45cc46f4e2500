/* cuda_emu.cpp — the block scheduler of cuda_emu.h: a block's threads are fibers on
 * guarded stacks, switched at barriers.  On x86-64 the switch is a few instructions of
 * our own (callee-saved registers and the stack pointer); glibc's swapcontext also
 * saves the signal mask, a system call per switch, which made the emulated training
 * step 20x slower.  Elsewhere ucontext. */
#include "tests/emu/cuda_emu.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <ucontext.h>

#if defined(__x86_64__)
#define EMU_ASM_SWITCH 1
/* emu_ctx_switch(&save, to): pushes the callee-saved registers, stores the stack pointer
 * in save, loads to and pops the registers saved there; returns into the other fiber.
 * A fresh stack holds six zero registers and then the entry point as return address. */
extern "C" void emu_ctx_switch(void **save, void *to);
__asm__(".text\n"
        ".globl emu_ctx_switch\n"
        ".type emu_ctx_switch,@function\n"
        "emu_ctx_switch:\n"
        "    pushq %rbp\n"
        "    pushq %rbx\n"
        "    pushq %r12\n"
        "    pushq %r13\n"
        "    pushq %r14\n"
        "    pushq %r15\n"
        "    movq %rsp, (%rdi)\n"
        "    movq %rsi, %rsp\n"
        "    popq %r15\n"
        "    popq %r14\n"
        "    popq %r13\n"
        "    popq %r12\n"
        "    popq %rbx\n"
        "    popq %rbp\n"
        "    ret\n"
        ".size emu_ctx_switch,.-emu_ctx_switch\n");
#endif
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_ASAN 1
#endif
#endif
#ifdef EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

uint3 emu_threadIdx, emu_blockIdx;
dim3 emu_blockDim, emu_gridDim;

namespace {

enum { RUN, WAIT_WARP, WAIT_BLOCK, DONE };

/* Big enough for the flash backward's fragments (16 of 1 KiB) at -O0 under ASan (a guard
 * page below each stack turns an overflow into a fault), and small: ASan clears the
 * shadow of the whole stack at every switch, by mmap beyond 64 KiB of shadow. */
const size_t STACK = 128 * 1024;

struct Fiber {
#ifdef EMU_ASM_SWITCH
    void *sp;
#else
    ucontext_t ctx;
#endif
    int state;
    uint3 tid;
    int lane, warp;
    uint64_t mma_calls;   /* this thread's WMMA products so far in the block */
    uint64_t loads;       /* and its WMMA loads */
    unsigned gather;      /* this thread's warp gathers so far (emu_warp_gather) */
    struct Copy {
        void *dst;
        const void *src;
        size_t n;
        long group;       /* -1 until committed */
    };
    std::vector<Copy> copies;   /* cp.async in flight */
    long groups;                /* committed so far */
    /* the warp-level operation this thread waits at (WAIT_WARP): its kind (W_*) and how
     * many warp-level waits this thread has made in the block, so that lanes of one warp
     * released together are known to be at the same operation */
    int wkind;
    long wseq;
    const char *wfile;    /* the source line of the warp-level operation waited at (from */
    int wline;            /* emu_warp_site; 0 when the call gave none) */
    const char *nfile;    /* emu_warp_site's, for the next warp-level wait */
    int nline;
    const char *bfile;   /* the __syncthreads this thread waits at (source file, line) */
    int bline;
};

/* kinds of warp-level waits */
enum { W_SYNCWARP = 1, W_SHFL, W_COLLECTIVE };
const char *const wkind_name[] = {"?", "__syncwarp", "a shuffle", "ldmatrix/mma.sync"};

/* one warp's recent WMMA products, by call number (see nvcuda::wmma::emu_mma) */
const int MEMO = 128;
struct MmaMemo {
    uint64_t tag[MEMO];   /* block number << 32 | call number, 0 = empty */
    float a[MEMO][256], b[MEMO][256], c[MEMO][256], d[MEMO][256];
};
/* one warp's recent WMMA loads, by call number (see emu_load_slot) */
const int LOADS = 256;
struct LoadRing {
    uint64_t tag[LOADS];
    float v[LOADS][256];
};

struct Emu {
    std::vector<Fiber> f;
    unsigned char *stacks = nullptr;   /* one mapping: per fiber a guard page + STACK */
    size_t page = 0, nstacks = 0;
#ifdef EMU_ASM_SWITCH
    void *sched_sp = nullptr;
#else
    ucontext_t sched;
#endif
    int cur = -1;
    const std::function<void()> *body = nullptr;
    std::vector<unsigned char> shfl;   /* per warp 32 slots of 8 bytes */
    std::vector<unsigned char> gath;   /* per warp 2 x 32 slots of 32 bytes (emu_warp_gather) */
    unsigned char *dyn = nullptr;
    size_t dyn_bytes = 0;
    std::string err;
    bool direct = false;         /* threads run as plain calls, one after the other */
    long syncs = 0;              /* barriers and shuffles reached */
    /* per warp, made at a warp's first WMMA operation (most kernels have none) */
    std::vector<std::unique_ptr<MmaMemo>> memo;
    std::vector<std::unique_ptr<LoadRing>> loads;
    uint64_t block_seq = 0;
#ifdef EMU_ASAN
    const void *sched_bottom = nullptr;
    size_t sched_size = 0;
#endif
};

Emu *g_emu;
std::string g_last_err;   /* the last launch's error, for emu_error() after it */

unsigned char *stack_of(Emu *e, size_t i) { return e->stacks + i * (e->page + STACK) + e->page; }

/* from the running fiber back to the scheduler; final: the fiber is done for good */
void to_sched(bool final)
{
    Emu *e = g_emu;
    Fiber &me = e->f[e->cur];
#ifdef EMU_ASAN
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(final ? nullptr : &fake, e->sched_bottom, e->sched_size);
#endif
    (void)final;
#ifdef EMU_ASM_SWITCH
    emu_ctx_switch(&me.sp, e->sched_sp);
#else
    swapcontext(&me.ctx, &e->sched);
#endif
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

void entry()
{
    Emu *e = g_emu;
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &e->sched_bottom, &e->sched_size);
#endif
    (*e->body)();
    if (!e->f[e->cur].copies.empty()) emu_fail("a thread ended with cp.async copies never waited for");
    e->f[e->cur].state = DONE;
    to_sched(true);
}

void wait_at(int what, int kind = 0)
{
    Emu *e = g_emu;
    e->syncs++;
    if (e->direct) {   /* nothing to switch to: the launch is wrong from here on */
        emu_fail("a barrier or shuffle in a kernel run without fibers (emu_launch direct)");
        return;
    }
    Fiber &f = e->f[e->cur];
    f.state = what;
    if (what == WAIT_WARP) {
        f.wkind = kind;
        f.wseq++;
        f.wfile = f.nfile;   /* a shuffle's two waits keep its site: cleared after it */
        f.wline = f.nline;
    }
    to_sched(false);
}

void resume(Emu *e, int i)
{
    e->cur = i;
    emu_threadIdx = e->f[i].tid;
#ifdef EMU_ASAN
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, stack_of(e, (size_t)i), STACK);
#endif
#ifdef EMU_ASM_SWITCH
    emu_ctx_switch(&e->sched_sp, e->f[i].sp);
#else
    swapcontext(&e->sched, &e->f[i].ctx);
#endif
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
    e->cur = -1;
}

/* Releases what can be released after every runnable fiber has stopped: warps waiting
 * at __syncwarp first (all of them, or with one_warp only the first such warp in the
 * order asc/desc, so that one warp runs ahead of the others), then the block at
 * __syncthreads.  false when nothing can move (finished, or deadlocked: then err says
 * why). */
bool release(Emu *e, int nwarps, bool one_warp, bool desc)
{
    bool any = false;
    int n = (int)e->f.size(), live = 0, at_block = 0;
    for (int k = 0; k < nwarps; k++) {
        int w = desc ? nwarps - 1 - k : k;
        int ww = 0, wb = 0, lv = 0;
        for (int i = w * 32; i < n && i < w * 32 + 32; i++) {
            if (e->f[i].state == DONE) continue;
            lv++;
            ww += e->f[i].state == WAIT_WARP;
            wb += e->f[i].state == WAIT_BLOCK;
        }
        live += lv;
        at_block += wb;
        if (ww && wb) {
            emu_fail("warp %d: %d lanes at a warp barrier while %d wait at __syncthreads", w, ww, wb);
            return false;
        }
        if (ww && ww == lv) {
            /* on the GPU the lanes of a warp meet at one instruction: lanes at different
             * warp-level operations (a shuffle or __syncwarp in a lane-dependent branch,
             * or after a different number of them) are divergent, undefined there */
            const Fiber *first = nullptr;
            int done = 0;
            for (int i = w * 32; i < n && i < w * 32 + 32; i++) {
                const Fiber &f = e->f[(size_t)i];
                done += f.state == DONE;
                if (f.state != WAIT_WARP) continue;
                if (!first) {
                    first = &f;
                } else if (f.wkind != first->wkind || f.wseq != first->wseq ||
                           (f.wline && first->wline &&
                            (f.wline != first->wline || strcmp(f.wfile, first->wfile)))) {
                    emu_fail("warp %d: divergent warp-level operations: lane %d at %s (%s:%d, "
                             "its warp wait %ld), lane %d at %s (%s:%d, its warp wait %ld)",
                             w, first->lane, wkind_name[first->wkind],
                             first->wfile ? first->wfile : "?", first->wline, first->wseq,
                             f.lane, wkind_name[f.wkind], f.wfile ? f.wfile : "?", f.wline,
                             f.wseq);
                    return false;
                }
            }
            /* ldmatrix and mma.sync are .aligned: all 32 lanes execute them */
            if (done && first->wkind == W_COLLECTIVE) {
                emu_fail("warp %d: ldmatrix/mma.sync (.aligned) reached with %d lanes exited", w, done);
                return false;
            }
        }
        if (ww && ww == lv && !(any && one_warp)) {
            for (int i = w * 32; i < n && i < w * 32 + 32; i++)
                if (e->f[i].state == WAIT_WARP) e->f[i].state = RUN;
            any = true;
        }
    }
    if (any) return true;
    if (!live) return false;
    if (at_block == live) {
        /* __syncthreads is bar.sync .aligned: every lane of a warp executes it.  Whole
         * warps that have exited are tolerated (the hardware counts them as arrived); a
         * warp with some lanes exited and the others at the barrier is undefined */
        /* one barrier: threads at two different __syncthreads calls (a barrier in a
         * branch, or in a loop whose trip count differs between threads) are divergent,
         * undefined on the GPU however the threads meet here */
        const Fiber *first = nullptr;
        for (const auto &f : e->f) {
            if (f.state != WAIT_BLOCK) continue;
            if (!first) {
                first = &f;
            } else if (f.bline != first->bline ||
                       (f.bfile != first->bfile &&
                        (!f.bfile || !first->bfile || strcmp(f.bfile, first->bfile)))) {
                emu_fail("block (%u,%u,%u): threads %u and %u wait at different __syncthreads "
                         "(%s:%d, %s:%d): a barrier in divergent code",
                         emu_blockIdx.x, emu_blockIdx.y, emu_blockIdx.z,
                         (unsigned)(first - e->f.data()), (unsigned)(&f - e->f.data()),
                         first->bfile ? first->bfile : "?", first->bline,
                         f.bfile ? f.bfile : "?", f.bline);
                return false;
            }
        }
        for (int w = 0; w < nwarps; w++) {
            int done = 0, at = 0;
            for (int i = w * 32; i < n && i < w * 32 + 32; i++) {
                done += e->f[(size_t)i].state == DONE;
                at += e->f[(size_t)i].state == WAIT_BLOCK;
            }
            if (done && at) {
                emu_fail("block (%u,%u,%u) warp %d: %d lanes at __syncthreads while %d lanes "
                         "of the warp have exited",
                         emu_blockIdx.x, emu_blockIdx.y, emu_blockIdx.z, w, at, done);
                return false;
            }
        }
        for (auto &f : e->f)
            if (f.state == WAIT_BLOCK) f.state = RUN;
        return true;
    }
    emu_fail("block (%u,%u,%u): deadlock, %d of %d live threads at __syncthreads",
             emu_blockIdx.x, emu_blockIdx.y, emu_blockIdx.z, at_block, live);
    return false;
}

/* thread i of the block: its indices and a fresh state */
Fiber &init_thread(Emu *e, int i)
{
    Fiber &f = e->f[(size_t)i];
    unsigned t = (unsigned)i;
    f.tid = {t % emu_blockDim.x, (t / emu_blockDim.x) % emu_blockDim.y,
             t / (emu_blockDim.x * emu_blockDim.y)};
    f.lane = i % 32;
    f.warp = i / 32;
    f.state = RUN;
    f.mma_calls = 0;
    f.loads = 0;
    f.gather = 0;
    f.copies.clear();
    f.groups = 0;
    f.wkind = 0;
    f.wseq = 0;
    f.bfile = nullptr;
    f.bline = 0;
    f.wfile = f.nfile = nullptr;
    f.wline = f.nline = 0;
    return f;
}

/* fiber i of the block: init_thread and a fresh context on its stack */
void init_fiber(Emu *e, int i)
{
    Fiber &f = init_thread(e, i);
    unsigned char *st = stack_of(e, (size_t)i);
#ifdef EMU_ASAN
    /* frames left poisoned by an earlier fiber on this stack (one that never finished) */
    ASAN_UNPOISON_MEMORY_REGION(st, STACK);
#endif
#ifdef EMU_ASM_SWITCH
    /* the top of the stack, as emu_ctx_switch pops it: six registers, then entry as the
     * return address, leaving the stack pointer 8 off a 16-byte boundary as after a call */
    uintptr_t top = (uintptr_t)(st + STACK) & ~(uintptr_t)15;
    void **sp = (void **)top;
    *--sp = nullptr;                  /* padding: after ret the stack pointer is 8 mod 16 */
    *--sp = (void *)entry;
    for (int r = 0; r < 6; r++) *--sp = nullptr;
    f.sp = sp;
#else
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = st;
    f.ctx.uc_stack.ss_size = STACK;
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, entry, 0);
#endif
}

int run_block(Emu *e, size_t smem, int order, unsigned *rng)
{
    int n = (int)e->f.size(), nwarps = (n + 31) / 32;
    e->block_seq++;
    if (smem) memset(e->dyn, 0xff, smem);   /* unwritten shared memory reads as NaN */
    if (e->direct) {
        for (int i = 0; i < n; i++) init_thread(e, i);
        for (int k = 0; k < n; k++) {
            int i = order == 1 || order == 4 ? n - 1 - k : k;
            e->cur = i;
            emu_threadIdx = e->f[(size_t)i].tid;
            (*e->body)();
            e->f[(size_t)i].state = DONE;
            e->cur = -1;
            if (!e->err.empty()) return -1;
        }
        return 0;
    }
    for (int i = 0; i < n; i++) init_fiber(e, i);
    std::vector<int> ord((size_t)n);
    for (;;) {
        bool desc = order == 1 || order == 4;
        for (int i = 0; i < n; i++) ord[(size_t)i] = desc ? n - 1 - i : i;
        if (order == 2)
            for (int i = n - 1; i > 0; i--) {
                *rng = *rng * 1103515245u + 12345u;
                int j = (int)((*rng >> 8) % (unsigned)(i + 1));
                int t = ord[(size_t)i];
                ord[(size_t)i] = ord[(size_t)j];
                ord[(size_t)j] = t;
            }
        for (int k = 0; k < n; k++)
            if (e->f[(size_t)ord[(size_t)k]].state == RUN) resume(e, ord[(size_t)k]);
        if (!release(e, nwarps, order >= 3, desc)) break;
    }
    for (auto &f : e->f)
        if (f.state != DONE) return -1;
    return 0;
}

}  // namespace

const char *emu_error(void) { return g_emu ? g_emu->err.c_str() : g_last_err.c_str(); }

void emu_fail(const char *fmt, ...)
{
    if (!g_emu || !g_emu->err.empty()) return;
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    g_emu->err = buf;
}

unsigned char *emu_dyn_smem(void) { return g_emu->dyn; }
int emu_lane(void) { return g_emu->cur >= 0 ? g_emu->f[g_emu->cur].lane : 0; }

void emu_syncthreads_at(const char *file, int line)
{
    Emu *e = g_emu;
    if (e && e->cur >= 0) {
        e->f[(size_t)e->cur].bfile = file;
        e->f[(size_t)e->cur].bline = line;
    }
    wait_at(WAIT_BLOCK);
}

void(__syncthreads)(void) { emu_syncthreads_at(nullptr, 0); }

/* the running thread's next warp-level wait is at file:line */
void emu_warp_site(const char *file, int line)
{
    Emu *e = g_emu;
    if (!e || e->cur < 0) return;
    e->f[(size_t)e->cur].nfile = file;
    e->f[(size_t)e->cur].nline = line;
}

static void warp_site_done(void)
{
    Emu *e = g_emu;
    if (!e || e->cur < 0) return;
    e->f[(size_t)e->cur].nfile = nullptr;
    e->f[(size_t)e->cur].nline = 0;
}

void(__syncwarp)(unsigned mask)
{
    if (mask != 0xffffffffu) emu_fail("__syncwarp(0x%x): partial masks are not modelled", mask);
    wait_at(WAIT_WARP, W_SYNCWARP);
    warp_site_done();
}

void emu_shfl(const void *v, size_t n, int src_lane, void *out, unsigned mask)
{
    Emu *e = g_emu;
    Fiber &me = e->f[e->cur];
    if (mask != 0xffffffffu) emu_fail("shuffle mask 0x%x: partial masks are not modelled", mask);
    int w = me.warp;
    unsigned char *slot = &e->shfl[(size_t)w * 32 * 8];
    memcpy(slot + me.lane * 8, v, n);
    wait_at(WAIT_WARP, W_SHFL);
    int warp_lanes = (int)e->f.size() - w * 32;
    if (src_lane >= warp_lanes) src_lane = e->f[e->cur].lane;
    /* an exited lane's value is undefined on the GPU (here: whatever its slot last held) */
    else if (e->f[(size_t)(w * 32 + src_lane)].state == DONE)
        emu_fail("warp %d: lane %d reads a shuffle value from lane %d, which has exited", w,
                 e->f[e->cur].lane, src_lane);
    memcpy(out, slot + src_lane * 8, n);
    wait_at(WAIT_WARP, W_SHFL);
    warp_site_done();
}

void nvcuda::wmma::emu_check_ptr(const void *p, unsigned ldm, size_t elem, const char *what)
{
    if ((uintptr_t)p % 32)
        emu_fail("wmma::%s: pointer %p is not 256-bit aligned", what, p);
    else if ((ldm * elem) % 16)
        emu_fail("wmma::%s: ldm %u is not a multiple of 16 bytes", what, ldm);
}

float *nvcuda::wmma::emu_load_slot(bool *filled)
{
    static float own[256];   /* outside a launch */
    Emu *e = g_emu;
    *filled = false;
    if (!e || e->cur < 0) return own;
    Fiber &f = e->f[e->cur];
    f.loads++;
    auto &rp = e->loads[(size_t)f.warp];
    if (!rp) {
        rp.reset(new LoadRing);
        memset(rp->tag, 0, sizeof rp->tag);
    }
    LoadRing &r = *rp;
    int slot = (int)(f.loads % LOADS);
    uint64_t tag = e->block_seq << 32 | (f.loads & 0xffffffffu);
    if (r.tag[slot] == tag) {
        *filled = true;
    } else if (r.tag[slot] > tag) {
        emu_fail("wmma: more than %d loads by one lane of warp %d between barriers", LOADS, f.warp);
    } else {
        r.tag[slot] = tag;
    }
    return r.v[slot];
}

void nvcuda::wmma::emu_mma(float *d, const float *a, const float *b, const float *c)
{
    Emu *e = g_emu;
    MmaMemo *m = nullptr;
    int slot = 0;
    uint64_t tag = 0;
    if (e && e->cur >= 0) {
        Fiber &f = e->f[e->cur];
        f.mma_calls++;
        auto &mp = e->memo[(size_t)f.warp];
        if (!mp) {
            mp.reset(new MmaMemo);
            memset(mp->tag, 0, sizeof mp->tag);
        }
        m = mp.get();
        slot = (int)(f.mma_calls % MEMO);
        tag = e->block_seq << 32 | (f.mma_calls & 0xffffffffu);
        if (m->tag[slot] == tag && !memcmp(m->a[slot], a, sizeof m->a[slot]) &&
            !memcmp(m->b[slot], b, sizeof m->b[slot]) && !memcmp(m->c[slot], c, sizeof m->c[slot])) {
            memcpy(d, m->d[slot], sizeof m->d[slot]);
            return;
        }
    }
    float r[256];
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            float s = c[i * 16 + j];
            for (int k = 0; k < 16; k++) s += a[i * 16 + k] * b[k * 16 + j];
            r[i * 16 + j] = s;
        }
    if (m) {
        m->tag[slot] = tag;
        memcpy(m->a[slot], a, sizeof r);
        memcpy(m->b[slot], b, sizeof r);
        memcpy(m->c[slot], c, sizeof r);
        memcpy(m->d[slot], r, sizeof r);
    }
    memcpy(d, r, sizeof r);
}

/* ---- warp-level matrix instructions, cp.async ---- */

void emu_warp_gather(const void *mine, size_t n, void *all)
{
    Emu *e = g_emu;
    if (!e || e->cur < 0 || e->direct) {
        emu_fail("a warp-collective instruction outside a fiber launch");
        return;
    }
    if (n > 32) {
        emu_fail("emu_warp_gather: %zu bytes per lane", n);
        return;
    }
    Fiber &me = e->f[(size_t)e->cur];
    /* two slot sets used in turn: a lane can get at most one gather ahead of the others
     * (the next one waits for them all), so the set it writes was read by everyone */
    unsigned char *slot = &e->gath[((size_t)me.warp * 2 + (me.gather & 1)) * 32 * 32];
    me.gather++;
    memcpy(slot + me.lane * 32, mine, n);
    wait_at(WAIT_WARP, W_COLLECTIVE);
    int lanes = (int)e->f.size() - me.warp * 32;
    if (lanes > 32) lanes = 32;
    if (lanes < 32) emu_fail("a warp-collective instruction in a partial warp (%d lanes)", lanes);

    for (int l = 0; l < 32; l++) memcpy((unsigned char *)all + l * n, slot + (l < lanes ? l : 0) * 32, n);
}

void emu_ldmatrix(uint32_t *r, int nmat, bool trans, const void *row)
{
    const void *rows[32];
    emu_warp_gather(&row, sizeof row, rows);
    int lane = emu_lane(), g = lane >> 2, t = lane & 3;
    for (int j = 0; j < nmat; j++) {
        for (int k = 0; k < 8; k++)
            if ((uintptr_t)rows[j * 8 + k] % 16) {
                emu_fail("ldmatrix: row address %p (lane %d) is not 16-byte aligned", rows[j * 8 + k], j * 8 + k);
                return;
            }
        uint16_t lo, hi;
        if (!trans) {   /* row g of matrix j, columns 2t, 2t + 1 */
            const uint16_t *p = (const uint16_t *)rows[j * 8 + g];
            lo = p[2 * t];
            hi = p[2 * t + 1];
        } else {        /* column g, rows 2t and 2t + 1 */
            lo = ((const uint16_t *)rows[j * 8 + 2 * t])[g];
            hi = ((const uint16_t *)rows[j * 8 + 2 * t + 1])[g];
        }
        r[j] = (uint32_t)lo | (uint32_t)hi << 16;
    }
}

static float emu_lo_value(uint32_t reg, int half, bool bf16)
{
    uint16_t h = (uint16_t)(half ? reg >> 16 : reg & 0xffffu);
    return bf16 ? llm_quant_bf16_to_f32(h) : llm_quant_f16_to_f32(h);
}

void emu_mma16816(float *d, const uint32_t *a, const uint32_t *b, bool bf16)
{
    uint32_t regs[32][6];   /* each lane's a0..a3, b0, b1 */
    uint32_t mine[6] = {a[0], a[1], a[2], a[3], b[0], b[1]};
    emu_warp_gather(mine, sizeof mine, regs);
    int lane = emu_lane(), g = lane >> 2, t = lane & 3;
    /* A(r, k): lane (r % 8) * 4 + (k % 8) / 2, register (r >= 8) + 2 (k >= 8), half k % 2;
     * B(k, n): lane n * 4 + (k % 8) / 2, register k >= 8, half k % 2;
     * D: this lane's d0, d1 at (g, 2t), (g, 2t + 1), d2, d3 at (g + 8, 2t), (g + 8, 2t + 1) */
    for (int i = 0; i < 4; i++) {
        int row = g + (i >> 1) * 8, col = 2 * t + (i & 1);
        float s = d[i];
        for (int k = 0; k < 16; k++) {
            float av = emu_lo_value(regs[(row % 8) * 4 + (k % 8) / 2][(row >= 8) + 2 * (k >= 8)], k & 1, bf16);
            float bv = emu_lo_value(regs[col * 4 + (k % 8) / 2][4 + (k >= 8)], k & 1, bf16);
            s += av * bv;
        }
        d[i] = s;
    }
}

void emu_cp_async(void *smem, const void *gmem, size_t n)
{
    Emu *e = g_emu;
    if (n != 4 && n != 8 && n != 16) emu_fail("cp.async of %zu bytes", n);
    else if ((uintptr_t)smem % n || (uintptr_t)gmem % n)
        emu_fail("cp.async of %zu bytes: %p <- %p not aligned", n, smem, gmem);
    if (!e || e->cur < 0) {
        memcpy(smem, gmem, n);
        return;
    }
    e->f[(size_t)e->cur].copies.push_back({smem, gmem, n, -1});
}

void emu_cp_async_commit(void)
{
    Emu *e = g_emu;
    if (!e || e->cur < 0) return;
    Fiber &f = e->f[(size_t)e->cur];
    for (auto &c : f.copies)
        if (c.group < 0) c.group = f.groups;
    f.groups++;
}

void emu_cp_async_wait(int n)
{
    Emu *e = g_emu;
    if (!e || e->cur < 0) return;
    Fiber &f = e->f[(size_t)e->cur];
    std::vector<Fiber::Copy> left;
    for (auto &c : f.copies) {
        if (c.group >= 0 && c.group < f.groups - n) memcpy(c.dst, c.src, c.n);
        else left.push_back(c);
    }
    f.copies.swap(left);
}

long emu_last_syncs;

int emu_launch(dim3 grid, dim3 block, size_t smem, const std::function<void()> &kernel, int order,
               unsigned seed, bool direct)
{
    Emu e;
    e.direct = direct;
    size_t n = (size_t)block.x * block.y * block.z;
    g_last_err.clear();
    if (!n || n > 1024 || !grid.x || !grid.y || !grid.z) {
        char buf[128];
        snprintf(buf, sizeof buf, "launch: %zu threads per block, grid %ux%ux%u", n, grid.x,
                 grid.y, grid.z);
        g_last_err = buf;
        return -1;
    }
    /* the stacks are kept from one launch to the next (mapping them is the slow part) */
    static unsigned char *stacks;
    static size_t nstacks;
    e.page = (size_t)sysconf(_SC_PAGESIZE);
    if (nstacks < n) {
        if (stacks) munmap(stacks, nstacks * (e.page + STACK));
        nstacks = 0;
        void *m = mmap(nullptr, n * (e.page + STACK), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) {
            stacks = nullptr;
            g_last_err = "cannot map fiber stacks";
            return -1;
        }
        stacks = (unsigned char *)m;
        nstacks = n;
        for (size_t i = 0; i < n; i++) mprotect(stacks + i * (e.page + STACK), e.page, PROT_NONE);
    }
    e.stacks = stacks;
    e.nstacks = n;
    if (smem && posix_memalign((void **)&e.dyn, 128, smem)) {
        g_last_err = "out of memory for shared memory";
        return -1;
    }
    e.f.resize(n);
    e.shfl.assign((n + 31) / 32 * 32 * 8, 0);
    e.gath.assign((n + 31) / 32 * 2 * 32 * 32, 0);
    e.memo.resize((n + 31) / 32);
    e.loads.resize((n + 31) / 32);
    e.body = &kernel;
    e.dyn_bytes = smem;
    g_emu = &e;
    emu_blockDim = block;
    emu_gridDim = grid;
    unsigned rng = seed;
    int rc = 0;
    for (unsigned z = 0; z < grid.z && !rc; z++)
        for (unsigned y = 0; y < grid.y && !rc; y++)
            for (unsigned x = 0; x < grid.x && !rc; x++) {
                emu_blockIdx = {x, y, z};
                rc = run_block(&e, smem, order, &rng);
                if (!rc && !e.err.empty()) rc = -1;
            }
    g_last_err = e.err;
    emu_last_syncs = e.syncs;
    free(e.dyn);
    g_emu = nullptr;
    if (rc && g_last_err.empty()) g_last_err = "a thread did not finish";
    return g_last_err.empty() ? 0 : -1;
}
