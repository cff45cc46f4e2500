/* train_agree.c — the ranks' agreement on the training config before any work
 * (llm_train_dist_check_config, train_dist.h): every key compared but a rank's own, the
 * files every rank reads by what they hold, one voice for the refusal. */
#include "common/train_dist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/hash.h"
#include "common/pathsum.h"

/* How the ranks compare a key's value (llm_train_dist_check_config). */
typedef enum { CMP_OWN, CMP_TEXT, CMP_DATA } cmp_kind;

static cmp_kind cmp_of(const char *key)
{
    static const char *const per_rank[] = {LLM_TRAIN_DIST_PER_RANK_KEYS};
    for (size_t j = 0; j < sizeof per_rank / sizeof *per_rank; j++)
        if (!strcmp(key, per_rank[j]))
            return CMP_OWN;
    /* files every rank reads: by what they hold (pathsum.h), so that node-local copies
     * under node-specific paths (/scratch/$NODE/train.bin) agree */
    if (!strcmp(key, "data.train") || !strcmp(key, "model.init_from"))
        return CMP_DATA;
    return CMP_TEXT;
}

/* A 64-bit hash as a double, exactly (52 bits). */
static double h52(uint64_t h)
{
    return (double)(h >> 12);
}

/* This rank's digest of key's value val into *v: its text, or for CMP_DATA what it names.
 * 0, or an error naming the key and this rank. */
static int digest(const llm_dist *d, const char *key, const char *val, double *v, llm_status *st)
{
    uint64_t h = llm_fnv1a(LLM_FNV1A_INIT, val, strlen(val));
    if (cmp_of(key) == CMP_DATA && *val) {
        int rc;
        h = LLM_FNV1A_INIT;
        if (!strcmp(key, "data.train"))   /* a glob, as the data loader reads it */
            rc = llm_pathsum_glob(val, &h, st);
        else
            rc = llm_pathsum_file(val, &h, st);
        if (rc)
            return llm_err_prefix(st, "rank %d of %d: %s", llm_dist_rank(d), llm_dist_world(d),
                                  key);
    }
    *v = h52(h);
    return 0;
}

/* Key's value as it appears in a message, in at most VAL_SHOW bytes: paths by their
 * end, where node-specific paths differ. */
#define VAL_SHOW 64
static void show(const char *key, const char *val, char out[VAL_SHOW])
{
    size_t n = strlen(val);
    if (!*val)
        snprintf(out, VAL_SHOW, "''");
    else if (n < VAL_SHOW)
        snprintf(out, VAL_SHOW, "%s", val);
    else if (cmp_of(key) == CMP_DATA)
        snprintf(out, VAL_SHOW, "...%s", val + n - (VAL_SHOW - 4));
    else
        snprintf(out, VAL_SHOW, "%.*s...", VAL_SHOW - 4, val);
}

/* Rank r's shown value of key (every rank calls it; root r has it in mine). */
static int value_of(llm_dist *d, int r, const char *mine, char out[VAL_SHOW], llm_status *st)
{
    double buf[VAL_SHOW / sizeof(double)];
    memset(buf, 0, sizeof buf);
    if (llm_dist_rank(d) == r)
        memcpy(buf, mine, VAL_SHOW);
    if (llm_dist_broadcast(d, buf, sizeof buf / sizeof *buf, LLM_DIST_F64, r, st))
        return st->code;
    memcpy(out, buf, VAL_SHOW);
    out[VAL_SHOW - 1] = 0;
    return 0;
}

int llm_train_dist_check_config(const llm_train_config *cfg, llm_dist *d, llm_status *st)
{
    int world = llm_dist_world(d), rank = llm_dist_rank(d), nk = 0;
    if (world == 1)
        return 0;
    while (llm_config_key(nk, NULL, NULL))
        nk++;
    llm_node *n = llm_config_to_node(cfg);
    /* per key: this rank's digest (mine, then rank 0's), and the lowest rank whose digest
     * differs from rank 0's and the lowest that could not make one (world: none), each
     * negated for an all-reduce MAX */
    double *v = calloc((size_t)3 * nk, sizeof *v), *h = v, *diff = v + nk, *fail = v + 2 * nk;
    if (!n || !v) {
        llm_node_free(n);
        free(v);
        return llm_err(st, LLM_ENOMEM, "out of memory");
    }
    llm_status own = {0};
    int own_bad = -1;   /* the key this rank could not digest */
    for (int i = 0; i < nk; i++) {
        const char *key = llm_config_key(i, NULL, NULL);
        const llm_node *x = llm_node_path(n, key);
        if (cmp_of(key) == CMP_OWN || !x || !llm_node_str(x) || own_bad >= 0)
            continue;
        if (digest(d, key, llm_node_str(x), &h[i], &own))
            own_bad = i;
    }
    for (int i = 0; i < nk; i++)
        diff[i] = h[i];
    int rc = llm_dist_broadcast(d, diff, (size_t)nk, LLM_DIST_F64, 0, st);
    for (int i = 0; !rc && i < nk; i++) {
        fail[i] = -(double)(i == own_bad ? rank : world);
        diff[i] = -(double)(i != own_bad && h[i] != diff[i] ? rank : world);
    }
    if (!rc)
        rc = llm_dist_allreduce(d, diff, (size_t)2 * nk, LLM_DIST_F64, LLM_DIST_MAX, st);
    int bad_key = -1, bad_rank = world;
    for (int i = 0; !rc && i < nk; i++)
        if (-fail[i] < bad_rank) {
            bad_rank = (int)-fail[i];
            bad_key = i;
        }
    if (!rc && bad_key >= 0) {
        /* a rank could not read a file its config names: it says why (its own message),
         * rank 0 (when it is not that rank) which one it was */
        if (own_bad >= 0) {
            *st = own;
            st->together = LLM_TOGETHER_OWN;
        } else {
            llm_err(st, LLM_ENOINPUT, "rank %d of %d cannot read what its %s names (rank %d "
                    "says why)", bad_rank, world, llm_config_key(bad_key, NULL, NULL), bad_rank);
            st->together = LLM_TOGETHER_SAME;
        }
        rc = st->code;
    }
    /* the differing keys with rank 0's value and the first other rank's: the same
     * message on every rank, which rank 0 alone reports */
    char msg[LLM_MSG_MAX - 160] = "";
    size_t l = 0;
    int bad = 0;
    for (int i = 0; !rc && i < nk; i++) {
        if (-diff[i] >= world)
            continue;
        if (bad++ >= 4)
            continue;
        int r = (int)-diff[i];
        const char *key = llm_config_key(i, NULL, NULL);
        char mine[VAL_SHOW], v0[VAL_SHOW], vr[VAL_SHOW];
        const char *val = llm_node_str(llm_node_path(n, key));
        show(key, val ? val : "", mine);
        if ((rc = value_of(d, 0, mine, v0, st)) || (rc = value_of(d, r, mine, vr, st)))
            break;
        const char *data = cmp_of(key) == CMP_DATA ? ": not the same data" : "";
        if (l + 1 >= sizeof msg)
            continue;
        if (!strcmp(v0, vr))
            l += (size_t)snprintf(msg + l, sizeof msg - l, "%s%s (%s on rank 0 and on rank %d%s)",
                                  l ? ", " : "", key, v0, r, data);
        else
            l += (size_t)snprintf(msg + l, sizeof msg - l, "%s%s (%s on rank 0, %s on rank %d%s)",
                                  l ? ", " : "", key, v0, vr, r, data);
    }
    if (!rc && bad) {
        rc = llm_err(st, LLM_EDATA, "the ranks were given different configs: %s%s differ%s "
                     "between ranks; give every rank the same config file and --set options",
                     msg, bad > 4 ? " and more" : "", bad == 1 ? "s" : "");
        st->together = LLM_TOGETHER_SAME;
    }
    llm_node_free(n);
    free(v);
    return rc;
}
