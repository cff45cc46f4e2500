/* dlsyms.c — a library's functions resolved at run time (dlsyms.h). */
#include "common/dlsyms.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

enum { LLM_DLSYMS_MAXLIB = 4 };

int llm_dlsyms_open(const char *const *libs, int nlib, const llm_dlsym *syms, int nsym,
                    int keep, char *why, size_t whylen)
{
    void *h[LLM_DLSYMS_MAXLIB] = { NULL };
    int i, rc = -1;
    if (nlib < 1 || nlib > LLM_DLSYMS_MAXLIB) {
        snprintf(why, whylen, "dlsyms: %d libraries (1..%d)", nlib, LLM_DLSYMS_MAXLIB);
        return -1;
    }
    for (i = 0; i < nlib; i++) {
        dlerror();
        h[i] = dlopen(libs[i], RTLD_NOW | RTLD_LOCAL);
        if (!h[i]) {
            const char *e = dlerror();
            snprintf(why, whylen, "cannot load %s: %s", libs[i], e ? e : "dlopen failed");
            goto out;
        }
    }
    for (i = 0; i < nsym; i++) {
        int l = syms[i].lib;
        void *p = l >= 0 && l < nlib ? dlsym(h[l], syms[i].name) : NULL;
        if (!p) {
            snprintf(why, whylen, "%s has no %s", l >= 0 && l < nlib ? libs[l] : "?",
                     syms[i].name);
            goto out;
        }
        memcpy(syms[i].slot, &p, sizeof p);   /* object to function pointer: POSIX */
    }
    rc = 0;
    if (keep)
        return 0;   /* open for the life of the process */
out:
    for (i = nlib - 1; i >= 0; i--)
        if (h[i])
            dlclose(h[i]);
    return rc;
}

int llm_dlsyms_status(int ok, const char *what, const char *why, char *err, size_t errlen)
{
    if (ok)
        return 0;
    if (err && errlen)
        snprintf(err, errlen, "%s: %s", what, why);
    return -1;
}
