/* nccl_dl.c — NCCL, opened when a run first needs it (common/nccl_dl.h).
 *
 * NCCL is a package of its own, often missing where the CUDA toolkit is installed: the
 * programs of a build with NCCL do not link libnccl, so they start where it is not
 * installed and only a run of several GPU ranks needs it.  This file
 * defines the NCCL functions the distributed layer and llm-bench call, with nccl.h's
 * signatures, and forwards them to the library opened by dlopen (LD_LIBRARY_PATH, the
 * program's run path $(NCCL_HOME)/lib64, the system's).
 */
#include "common/nccl_dl.h"

#include <stdio.h>

#if defined(LLM_NCCL) && !defined(LLM_CUDA_EMU)
#include <nccl.h>

#include "common/dlsyms.h"

#define LN_STR2(x) #x
#define LN_STR(x) LN_STR2(x)
#define LN_NAME "libnccl.so." LN_STR(NCCL_MAJOR)

/* X(return type, name, (parameters), (arguments)): every function used. */
#define LN_FUNCS(X)                                                                           \
    X(ncclResult_t, ncclGetVersion, (int *version), (version))                                \
    X(ncclResult_t, ncclGetUniqueId, (ncclUniqueId * id), (id))                               \
    X(ncclResult_t, ncclCommInitRank, (ncclComm_t * comm, int nranks, ncclUniqueId id,        \
                                       int rank),                                             \
      (comm, nranks, id, rank))                                                               \
    X(ncclResult_t, ncclCommInitAll, (ncclComm_t * comm, int ndev, const int *devlist),      \
      (comm, ndev, devlist))                                                                  \
    X(ncclResult_t, ncclCommDestroy, (ncclComm_t comm), (comm))                               \
    X(ncclResult_t, ncclCommAbort, (ncclComm_t comm), (comm))                                 \
    X(ncclResult_t, ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t * e), (comm, e))    \
    X(ncclResult_t, ncclGroupStart, (void), ())                                               \
    X(ncclResult_t, ncclGroupEnd, (void), ())                                                 \
    X(ncclResult_t, ncclAllReduce,                                                            \
      (const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op,          \
       ncclComm_t comm, cudaStream_t stream),                                                 \
      (send, recv, count, t, op, comm, stream))                                               \
    X(ncclResult_t, ncclReduce,                                                               \
      (const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op,          \
       int root, ncclComm_t comm, cudaStream_t stream),                                       \
      (send, recv, count, t, op, root, comm, stream))                                         \
    X(ncclResult_t, ncclReduceScatter,                                                        \
      (const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op,          \
       ncclComm_t comm, cudaStream_t stream),                                                 \
      (send, recv, count, t, op, comm, stream))                                               \
    X(ncclResult_t, ncclAllGather,                                                            \
      (const void *send, void *recv, size_t count, ncclDataType_t t, ncclComm_t comm,         \
       cudaStream_t stream),                                                                  \
      (send, recv, count, t, comm, stream))                                                   \
    X(ncclResult_t, ncclBroadcast,                                                            \
      (const void *send, void *recv, size_t count, ncclDataType_t t, int root,                \
       ncclComm_t comm, cudaStream_t stream),                                                 \
      (send, recv, count, t, root, comm, stream))

typedef struct {
#define LN_PTR(R, name, params, args) R (*name) params;
    LN_FUNCS(LN_PTR)
#undef LN_PTR
    const char *(*ncclGetErrorString)(ncclResult_t);
} ln_fns;

static ln_fns ln_fn;
static llm_dlonce ln_state = LLM_DLONCE_INIT;

static int ln_open(const char *name, ln_fns *fn, int keep, char *why, size_t whylen)
{
#define LN_ENTRY(R, nm, params, args) { 0, #nm, &fn->nm },
    const llm_dlsym syms[] = {
        LN_FUNCS(LN_ENTRY)
        { 0, "ncclGetErrorString", &fn->ncclGetErrorString },
    };
#undef LN_ENTRY
    return llm_dlsyms_open(&name, 1, syms, (int)(sizeof syms / sizeof *syms), keep, why, whylen);
}

static void ln_load(void)
{
    ln_state.loaded = ln_open(LN_NAME, &ln_fn, 1, ln_state.why, sizeof ln_state.why) == 0;
}

static int ln_ready(void)
{
    pthread_once(&ln_state.once, ln_load);
    return ln_state.loaded;
}

int llm_nccl_load(char *err, size_t errlen)
{
    return llm_dlsyms_status(ln_ready(), "NCCL", ln_state.why, err, errlen);
}

int llm_nccl_probe(const char *name, char *err, size_t errlen)
{
    ln_fns fn;
    char why[512];
    int ok = ln_open(name ? name : LN_NAME, &fn, 0, why, sizeof why) == 0;
    return llm_dlsyms_status(ok, "NCCL", why, err, errlen);
}

/* before a successful load every function fails as a failed system call */
#define LN_DEF(R, name, params, args)                                                         \
    LLM_DLSYMS_FORWARD(ln_ready, ln_fn, ncclSystemError, R, name, params, args)
LN_FUNCS(LN_DEF)
#undef LN_DEF

const char *ncclGetErrorString(ncclResult_t result)
{
    return ln_ready() ? ln_fn.ncclGetErrorString(result) : "NCCL not loaded";
}

#elif defined(LLM_NCCL)   /* the emulated build: tests/emu/nccl_emu.cpp is linked in */

int llm_nccl_load(char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    return 0;
}

int llm_nccl_probe(const char *name, char *err, size_t errlen)
{
    (void)name;
    if (err && errlen)
        snprintf(err, errlen, "NCCL: the emulated build links its stand-in, it opens no library");
    return -1;
}

#else   /* no NCCL in this build */

int llm_nccl_load(char *err, size_t errlen)
{
    if (err && errlen)
        snprintf(err, errlen, "NCCL: this build has none (make NCCL=1)");
    return -1;
}

int llm_nccl_probe(const char *name, char *err, size_t errlen)
{
    (void)name;
    return llm_nccl_load(err, errlen);
}

#endif
