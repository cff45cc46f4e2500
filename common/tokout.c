/* tokout.c — where encoded ids go (tokout.h). */
#include "common/tokout.h"
#include "common/afile.h"
#include "common/tokfile.h"

#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct llm_tokout {
    llm_tokout_spec spec;
    llm_afile text;
    llm_tokfile_writer bin;    /* FILE, SPLIT (all ids until the split), the open shard */
    int open;                  /* text or bin holds a file being made */
    int first;                 /* TEXT: no id written yet */
    uint64_t n;                /* ids taken */
    uint64_t in_shard;         /* SHARDS: ids in the open shard */
    unsigned shards;           /* SHARDS: shards committed */
    char name[PATH_MAX];
};

int llm_tokout_shard_name(char *buf, size_t n, const char *prefix, uint64_t k,
                          uint64_t shard_tokens, llm_status *st)
{
    if (k >= LLM_TOKOUT_MAX_SHARDS)
        return llm_err(st, LLM_EUSAGE, "more than %u shards of %llu tokens: use a larger "
                       "--shard-tokens (the names have 6 digits, so that they sort in order)",
                       LLM_TOKOUT_MAX_SHARDS, (unsigned long long)shard_tokens);
    if (snprintf(buf, n, "%s_%06u.bin", prefix, (unsigned)k) >= (int)n)
        return llm_err(st, LLM_EUSAGE, "output prefix too long");
    return LLM_OK;
}

static int shard_name(llm_tokout *o, unsigned k, llm_status *st)
{
    return llm_tokout_shard_name(o->name, sizeof o->name, o->spec.path, k, o->spec.shard_tokens, st);
}

int llm_tokout_open(llm_tokout **out, const llm_tokout_spec *spec, llm_status *st)
{
    *out = NULL;
    llm_tokout *o = calloc(1, sizeof *o);
    if (!o)
        return llm_err(st, LLM_ENOMEM, "out of memory");
    o->spec = *spec;
    o->first = 1;
    int rc = LLM_OK;
    switch (spec->kind) {
    case LLM_TOKOUT_COUNT:
        break;
    case LLM_TOKOUT_TEXT:
        rc = llm_afile_open(&o->text, spec->path, LLM_AFILE_STDOUT, st);
        o->open = !rc;
        break;
    case LLM_TOKOUT_FILE:
        rc = llm_tokfile_writer_open(&o->bin, spec->path, 0, st);
        o->open = !rc;
        break;
    case LLM_TOKOUT_SPLIT:
        if (snprintf(o->name, sizeof o->name, "%s_train.bin", spec->path) >= (int)sizeof o->name)
            rc = llm_err(st, LLM_EUSAGE, "output prefix too long");
        else
            rc = llm_tokfile_writer_open(&o->bin, o->name, 0, st);
        o->open = !rc;
        break;
    case LLM_TOKOUT_SHARDS: {
        if (!spec->shard_tokens || spec->shard_tokens > LLM_TOKFILE_MAX_TOKENS) {
            rc = llm_err(st, LLM_EUSAGE, "shards of %llu tokens (want 1 to %d)",
                         (unsigned long long)spec->shard_tokens, LLM_TOKFILE_MAX_TOKENS);
            break;
        }
        char pat[2 * PATH_MAX + 64];
        size_t k = 0;
        for (const char *c = spec->path; *c && k < 2 * PATH_MAX; c++) {
            if (strchr("*?[\\", *c))
                pat[k++] = '\\';   /* the prefix is a name, not a pattern */
            pat[k++] = *c;
        }
        glob_t g;
        snprintf(pat + k, sizeof pat - k, "_[0-9][0-9][0-9][0-9][0-9][0-9]*.bin");
        if (glob(pat, 0, NULL, &g) == 0) {
            rc = llm_err(st, LLM_EUSAGE, "'%s' exists: remove the earlier shards first (a glob "
                         "would read them with the new ones)", g.gl_pathv[0]);
            globfree(&g);
        }
        break;
    }
    }
    if (rc) {
        free(o);
        return rc;
    }
    *out = o;
    return LLM_OK;
}

static int put_text(llm_tokout *o, const uint32_t *v, size_t n, llm_status *st)
{
    char buf[1 << 14];
    size_t k = 0;
    int rc = LLM_OK;
    for (size_t i = 0; i < n && !rc; i++) {
        char tmp[11];
        int m = 0;
        uint32_t x = v[i];
        do
            tmp[m++] = (char)('0' + x % 10);
        while ((x /= 10));
        if (!o->first)
            buf[k++] = ' ';
        o->first = 0;
        while (m)
            buf[k++] = tmp[--m];
        if (k > sizeof buf - 12) {
            rc = llm_afile_put(&o->text, buf, k, st);
            k = 0;
        }
    }
    return !rc && k ? llm_afile_put(&o->text, buf, k, st) : rc;
}

static int end_shard(llm_tokout *o, llm_status *st)
{
    o->open = 0;
    int rc = llm_tokfile_writer_commit(&o->bin, st);
    if (!rc) {
        o->shards++;
        o->in_shard = 0;
    }
    return rc;
}

static int put_shards(llm_tokout *o, const uint32_t *v, size_t n, llm_status *st)
{
    int rc = LLM_OK;
    while (n && !rc) {
        if (!o->open) {
            if ((rc = shard_name(o, o->shards, st)) ||
                (rc = llm_tokfile_writer_open(&o->bin, o->name, 0, st)))
                break;
            o->open = 1;
        }
        uint64_t room = o->spec.shard_tokens - o->in_shard;
        size_t k = n < room ? n : (size_t)room;
        if ((rc = llm_tokfile_writer_put(&o->bin, v, k, st)))
            break;
        o->in_shard += k;
        v += k;
        n -= k;
        if (o->in_shard == o->spec.shard_tokens)
            rc = end_shard(o, st);
    }
    return rc;
}

int llm_tokout_put(void *tokout, const uint32_t *ids, size_t n, llm_status *st)
{
    llm_tokout *o = tokout;
    int rc = LLM_OK;
    switch (o->spec.kind) {
    case LLM_TOKOUT_COUNT:
        break;
    case LLM_TOKOUT_TEXT:
        rc = put_text(o, ids, n, st);
        break;
    case LLM_TOKOUT_FILE:
    case LLM_TOKOUT_SPLIT:
        rc = llm_tokfile_writer_put(&o->bin, ids, n, st);
        break;
    case LLM_TOKOUT_SHARDS:
        rc = put_shards(o, ids, n, st);
        break;
    }
    if (!rc)
        o->n += n;
    return rc;
}

/* Put a finished val and train file in place (both complete, synced and hidden beside
 * their names: nothing has changed yet) as nearly all-or-nothing as POSIX allows: there is
 * no rename of two files at once.  Val goes first and train last, so a new train file
 * means a whole new pair.  The old val is kept by a hard link (.NAME.keep.PID beside it)
 * until train is in place; if train's rename fails, the link is renamed back over val (or
 * the new val removed, when there was none), so the user sees the old pair (or none) and
 * an error, exit 74.  SIGINT, SIGTERM and SIGHUP wait until both renames are done.  What
 * is left:
 *  - a crash, SIGKILL or power loss between the two renames (microseconds) leaves the new
 *    val beside the old train, and the .keep link and train's temp file (hidden);
 *  - putting the old val back can fail as well (the disk went read-only): the message
 *    says that val is new and where the old one is kept;
 *  - where hard links are not supported the old val cannot be kept: a failed train rename
 *    then leaves the new val beside the old train, and the message says so;
 *  - the directory syncs after both renames can fail: the new pair is in place but may
 *    not survive a crash (exit 74, as for a single file).
 * Frees val and train either way. */
static int publish_pair(llm_afile *val, llm_afile *train, llm_status *st)
{
    char vpath[PATH_MAX], tpath[PATH_MAX], keep[PATH_MAX + 64];
    snprintf(vpath, sizeof vpath, "%s", val->path);
    snprintf(tpath, sizeof tpath, "%s", train->path);
    const char *slash = strrchr(vpath, '/'), *base = slash ? slash + 1 : vpath;
    snprintf(keep, sizeof keep, "%.*s.%s.keep.%ld", (int)(base - vpath), vpath, base,
             (long)getpid());
    int files = !val->in_place && !train->in_place;   /* not a device, FIFO or stdout */
    llm_afile_hold_signals();
    unlink(keep);   /* a crashed run's, of this pid */
    int had_val = files && access(vpath, F_OK) == 0;
    int kept = had_val && link(vpath, keep) == 0, link_err = kept ? 0 : errno;
    int rc = llm_afile_publish(val, st);
    if (rc) {
        llm_afile_abort(train);   /* nothing changed */
    } else if ((rc = llm_afile_publish(train, st)) && files) {
        /* put val back as it was: the pair stays the old one */
        char msg[PATH_MAX + 128] = "", first[LLM_MSG_MAX];
        if (kept && rename(keep, vpath))
            snprintf(msg, sizeof msg, "new; the old one is kept as '%s'", keep);
        else if (had_val && !kept)
            snprintf(msg, sizeof msg, "new; the old one could not be kept (link: %s)",
                     strerror(link_err));
        else if (!had_val && unlink(vpath))
            snprintf(msg, sizeof msg, "new and could not be removed");
        if (*msg && st) {
            snprintf(first, sizeof first, "%s", st->msg);
            llm_err(st, rc, "%s; '%s' is %s", first, vpath, msg);
        }
        kept = 0;   /* renamed back (or left, named in the message) */
    }
    if (kept)
        unlink(keep);
    llm_afile_release_signals();
    if (!rc && files && (rc = llm_afile_sync_dir(vpath, st)) == LLM_OK)
        rc = llm_afile_sync_dir(tpath, st);
    return rc;
}

/* The last val_fraction of the ids (from the document start nearest that cut, when
 * there are documents) move to PREFIX_val.bin. */
static int commit_split(llm_tokout *o, const llm_encoder *e, char *summary, size_t len,
                        llm_status *st)
{
    uint64_t n = o->n;
    if (n < 2)
        return llm_err(st, LLM_EDATA, "%llu tokens: too few to split into train and val",
                       (unsigned long long)n);
    uint64_t nval = (uint64_t)(o->spec.val_fraction * (double)n + 0.5);
    if (nval < 1)
        nval = 1;
    if (nval >= n)
        nval = n - 1;
    uint64_t cut = n - nval, best = 0;
    size_t ndocs;
    const uint64_t *starts = llm_encoder_doc_starts(e, &ndocs);
    for (size_t k = 1; starts && k < ndocs; k++) {
        uint64_t s = starts[k];
        if (s == 0 || s >= n)
            continue;
        uint64_t dist = s > cut ? s - cut : cut - s, bd = best > cut ? best - cut : cut - best;
        if (!best || dist < bd)
            best = s;
    }
    if (best)
        cut = best;
    char val[PATH_MAX];
    if (snprintf(val, sizeof val, "%s_val.bin", o->spec.path) >= (int)sizeof val)
        return llm_err(st, LLM_EUSAGE, "output prefix too long");
    llm_tokfile_writer vw;
    /* each file's own version: 1 unless its ids need 2 */
    int rc = llm_tokfile_writer_open(&vw, val, o->bin.autov ? 0 : o->bin.version, st);
    if (rc)
        return rc;
    if ((rc = llm_tokfile_writer_split(&o->bin, cut, &vw, st))) {
        llm_tokfile_writer_abort(&vw);
        return rc;
    }
    o->open = 0;
    if ((rc = llm_tokfile_writer_finish(&vw, st))) {
        llm_tokfile_writer_abort(&o->bin);
        return rc;
    }
    if ((rc = llm_tokfile_writer_finish(&o->bin, st))) {
        llm_tokfile_writer_abort(&vw);
        return rc;
    }
    rc = publish_pair(&vw.a, &o->bin.a, st);
    double got = (double)(n - cut) / (double)n, want = o->spec.val_fraction;
    if (!rc)
        snprintf(summary, len, "%s: %llu tokens, %s: %llu tokens%s", o->name,
                 (unsigned long long)cut, val, (unsigned long long)(n - cut),
                 got > 2 * want || got < want / 2 ? " (far from --val-fraction: the nearest "
                                                   "document start was that far)" : "");
    return rc;
}

int llm_tokout_commit(llm_tokout *o, const llm_encoder *e, char *summary, size_t len,
                      llm_status *st)
{
    int rc = LLM_OK;
    snprintf(summary, len, "%llu tokens", (unsigned long long)o->n);
    switch (o->spec.kind) {
    case LLM_TOKOUT_COUNT:
        break;
    case LLM_TOKOUT_TEXT:
        if (!(rc = llm_afile_put(&o->text, "\n", 1, st))) {
            o->open = 0;
            rc = llm_afile_commit(&o->text, st);
        }
        break;
    case LLM_TOKOUT_FILE:
        o->open = 0;
        rc = llm_tokfile_writer_commit(&o->bin, st);
        break;
    case LLM_TOKOUT_SPLIT:
        rc = commit_split(o, e, summary, len, st);
        break;
    case LLM_TOKOUT_SHARDS:
        /* the last, partly filled shard; an empty input is refused at its commit (llm.c's
         * loader asserts a count above 0) */
        if (o->open || !o->shards) {
            if (!o->open && !(rc = shard_name(o, 0, st)) &&
                !(rc = llm_tokfile_writer_open(&o->bin, o->name, 0, st)))
                o->open = 1;
            if (!rc)
                rc = end_shard(o, st);
        }
        if (!rc && o->shards == 1)
            snprintf(summary, len, "1 shard, %s: %llu tokens", o->name, (unsigned long long)o->n);
        else if (!rc)
            snprintf(summary, len, "%u shards, %s_000000.bin .. %s: %llu tokens", o->shards,
                     o->spec.path, o->name, (unsigned long long)o->n);
        break;
    }
    if (rc)
        llm_tokout_abort(o);
    else
        free(o);
    return rc;
}

void llm_tokout_abort(llm_tokout *o)
{
    if (!o)
        return;
    if (o->open && o->spec.kind == LLM_TOKOUT_TEXT)
        llm_afile_abort(&o->text);
    else if (o->open)
        llm_tokfile_writer_abort(&o->bin);
    /* shards already finished by this run: none existed before it (open refuses) */
    for (unsigned k = 0; o->spec.kind == LLM_TOKOUT_SHARDS && k < o->shards; k++)
        if (!shard_name(o, k, NULL))
            unlink(o->name);
    free(o);
}
