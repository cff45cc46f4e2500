/* dlsyms.h — a library's functions resolved at run time into a table of pointers.
 *
 * For a library the programs use only in some runs and do not link, so that they start
 * where it is not installed (NCCL: common/nccl_dl.c).  The user defines the library's
 * functions it calls with the header's signatures and forwards them through its table.
 */
#ifndef LLM_DLSYMS_H
#define LLM_DLSYMS_H

#include <pthread.h>
#include <stddef.h>

typedef struct {
    int lib;            /* index into the libraries */
    const char *name;   /* the symbol */
    void *slot;         /* the address of the function pointer to set */
} llm_dlsym;

/* dlopen libs[0..nlib) (RTLD_NOW | RTLD_LOCAL: their symbols stay out of the global
 * scope, so they never interpose on the forwarding functions of the same names, which
 * the programs do not export either) and set every slot.  keep 0: close them again (a
 * probe; the slots are then dangling).  0, or -1 with "cannot load LIB: <dlerror>" or
 * "LIB has no NAME" in why (cut to whylen). */
int llm_dlsyms_open(const char *const *libs, int nlib, const llm_dlsym *syms, int nsym,
                    int keep, char *why, size_t whylen);

/* A table's state: opened once per process (pthread_once), whether that worked, why not. */
typedef struct {
    pthread_once_t once;
    int loaded;
    char why[512];
} llm_dlonce;
#define LLM_DLONCE_INIT { PTHREAD_ONCE_INIT, 0, "" }

/* The definition of function name, forwarding to the pointer of the same name in table
 * once ready() says the library is open, else returning fail.  For X-macro lists. */
#define LLM_DLSYMS_FORWARD(ready, table, fail, R, name, params, args)                        \
    R name params { return ready() ? table.name args : fail; }

/* The caller's answer after an open: 0 when ok, else -1 with "what: why" in err (when
 * err is not NULL). */
int llm_dlsyms_status(int ok, const char *what, const char *why, char *err, size_t errlen);

#endif
