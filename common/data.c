/* data.c — batches over token files, with an optional prefetch thread (see data.h). */
#include "common/data.h"
#include "common/clock.h"
#include "common/fsutil.h"
#include "common/hash.h"
#include "common/rng.h"

#include <errno.h>
#include <glob.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "common/tokfile.h"

#define MAX_FILES 100000

/* What made a batch bad: an id at or above the vocabulary, or a file that shrank under
 * its mapping (its pages past the new end would raise SIGBUS when read). */
typedef struct { int file; uint64_t off; uint32_t id; int shrank; } bad_id;

struct llm_data {
    llm_tokfile *files;
    struct stat *sb;      /* each file as opened: device, inode and size */
    char **names;
    int64_t vocab;
    uint64_t *starts;     /* random: cumulative count of window starts before file i */
    int nfiles;
    uint64_t nwin;        /* window starts over all files */
    uint64_t ntok;
    uint64_t files_hash;  /* llm_data_pos.files_hash */
    int B, T, sequential, prefetch;

    llm_data_pos pos;     /* producer position (after the read-ahead) */
    llm_data_pos handed;  /* position after the batches handed out */

    /* one-slot prefetch buffer */
    int32_t *slot;        /* B*(T+1) tokens */
    llm_data_pos slot_pos;
    int slot_bad;         /* the slot's batch holds an id >= vocab, or its file shrank: */
    bad_id bad;           /* where */
    int full, quit, running;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;

    double wait_s;
};

/* Whether file f, mapped, is now shorter than when it was opened (truncated in place:
 * the same device and inode; a file renamed over its name leaves the mapping intact).
 * Checked before each read, so that a file cut during a run is an error rather than a
 * SIGBUS; a cut between this check and the read can still raise it. */
static int shrank(const llm_data *d, int f)
{
    struct stat now;
    const struct stat *was = &d->sb[f];
    return d->files[f].mapped && stat(d->names[f], &now) == 0 && now.st_dev == was->st_dev &&
           now.st_ino == was->st_ino && now.st_size < was->st_size;
}

/* The error of a bad batch (LLM_EDATA). */
static int bad_err(const llm_data *d, const bad_id *b, llm_status *st)
{
    if (b->shrank)
        return llm_err(st, LLM_EDATA, "'%s': the file shrank while it was read (it was %lld "
                       "bytes): a data file changed under the run", d->names[b->file],
                       (long long)d->sb[b->file].st_size);
    return llm_err(st, LLM_EDATA, "'%s': token id %u at position %llu is not below the "
                   "vocabulary size %lld", d->names[b->file], b->id,
                   (unsigned long long)b->off, (long long)d->vocab);
}

/* Fill rows (B x (T+1)) from *p and advance it.  Returns 0, or -1 with *bad set when an
 * id is not below the vocabulary (ids are checked here, batch by batch, so that opening
 * never scans whole files). */
static int produce(const llm_data *d, llm_data_pos *p, int32_t *rows, bad_id *bad)
{
    size_t W = (size_t)d->T + 1;
    int rc = 0, checked = -1;   /* the file last checked for shrinking in this batch */
    for (int b = 0; b < d->B; b++) {
        int f;
        uint64_t off;
        if (d->sequential) {
            /* skip files too short for one more window; at least one file has a window */
            while (p->offset + W > d->files[p->file].ntok) {
                p->offset = 0;
                if (++p->file == (uint64_t)d->nfiles) {
                    p->file = 0;
                    p->epoch++;
                }
            }
            f = (int)p->file;
            off = p->offset;
            p->offset += (uint64_t)d->T;
        } else {
            /* multiply-shift maps 64 random bits onto [0, nwin) without a division */
            uint64_t r = (uint64_t)(((unsigned __int128)llm_splitmix64(&p->rng) * d->nwin) >> 64);
            int lo = 0, hi = d->nfiles - 1;
            while (lo < hi) { /* last file with starts[f] <= r */
                int mid = (lo + hi + 1) / 2;
                if (d->starts[mid] <= r)
                    lo = mid;
                else
                    hi = mid - 1;
            }
            f = lo;
            off = r - d->starts[f];
        }
        int32_t *row = rows + (size_t)b * W;
        if (f != checked && shrank(d, f)) {   /* a stat per file and batch, not per row */
            *bad = (bad_id){f, off, 0, 1};
            return -1;
        }
        checked = f;
        llm_tokfile_read(&d->files[f], off, W, row);
        if (d->vocab > 0 && !rc)
            for (size_t i = 0; i < W; i++)
                if ((uint32_t)row[i] >= (uint64_t)d->vocab) {
                    *bad = (bad_id){f, off + i, (uint32_t)row[i], 0};
                    rc = -1;
                    break;
                }
    }
    p->batches++;
    return rc;
}

static void *worker(void *arg)
{
    llm_data *d = arg;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        while (d->full && !d->quit)
            pthread_cond_wait(&d->cv, &d->mu);
        if (d->quit)
            break;
        llm_data_pos p = d->pos;
        pthread_mutex_unlock(&d->mu);
        bad_id bad;
        int r = produce(d, &p, d->slot, &bad);   /* the slot is ours while !full */
        pthread_mutex_lock(&d->mu);
        d->pos = p;
        d->slot_pos = p;
        d->slot_bad = r != 0;
        if (r)
            d->bad = bad;
        d->full = 1;
        pthread_cond_broadcast(&d->cv);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

static void stop_thread(llm_data *d)
{
    if (!d->running)
        return;
    pthread_mutex_lock(&d->mu);
    d->quit = 1;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->th, NULL);
    d->running = 0;
    d->quit = 0;
    d->full = 0;
}

static int start_thread(llm_data *d)
{
    d->full = 0;
    d->quit = 0;
    if (pthread_create(&d->th, NULL, worker, d))
        return -1;
    d->running = 1;
    return 0;
}

int llm_data_open(llm_data **out, const llm_data_opts *o, llm_status *st)
{
    *out = NULL;
    if (o->B < 1 || o->T < 1)
        return llm_err(st, LLM_EUSAGE, "data: batch size and sequence length must be positive");
    glob_t g;
    if (llm_glob_files(o->pattern, &g, st))
        return st->code;
    if (g.gl_pathc > MAX_FILES) {
        globfree(&g);
        return llm_err(st, LLM_EDATA, "'%s' matches more than %d files", o->pattern, MAX_FILES);
    }
    llm_data *d = calloc(1, sizeof *d);
    int n = (int)g.gl_pathc;
    if (!d || !(d->files = calloc((size_t)n, sizeof *d->files)) ||
        !(d->names = calloc((size_t)n, sizeof *d->names)) ||
        !(d->sb = calloc((size_t)n, sizeof *d->sb)) ||
        !(d->starts = calloc((size_t)n, sizeof *d->starts)) ||
        !(d->slot = malloc((size_t)o->B * ((size_t)o->T + 1) * sizeof(int32_t)))) {
        globfree(&g);
        llm_data_free(d);
        return llm_err(st, LLM_ENOMEM, "out of memory");
    }
    d->B = o->B;
    d->T = o->T;
    d->vocab = o->vocab;
    d->sequential = o->sequential;
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    d->files_hash = LLM_FNV1A_INIT;
    for (int i = 0; i < n; i++) {
        if (llm_tokfile_open(&d->files[i], g.gl_pathv[i], 0, st)) {
            globfree(&g);
            llm_data_free(d);
            return st->code;
        }
        d->nfiles = i + 1;
        if (stat(g.gl_pathv[i], &d->sb[i])) {
            llm_err(st, LLM_ENOINPUT, "'%s': %s", g.gl_pathv[i], strerror(errno));
            globfree(&g);
            llm_data_free(d);
            return st->code;
        }
        if (!(d->names[i] = strdup(g.gl_pathv[i]))) {
            globfree(&g);
            llm_data_free(d);
            return llm_err(st, LLM_ENOMEM, "out of memory");
        }
        d->starts[i] = d->nwin;
        uint64_t nt = d->files[i].ntok;
        /* the files by base name: a data folder moved elsewhere is the same data */
        const char *base = strrchr(d->names[i], '/');
        base = base ? base + 1 : d->names[i];
        unsigned char le[8];
        for (int k = 0; k < 8; k++)
            le[k] = (unsigned char)(nt >> (8 * k));
        d->files_hash = llm_fnv1a(d->files_hash, base, strlen(base) + 1);
        d->files_hash = llm_fnv1a(d->files_hash, le, sizeof le);
        d->ntok += nt;
        if (nt > (uint64_t)o->T)
            d->nwin += nt - (uint64_t)o->T;
    }
    if (d->nwin == 0) {
        llm_err(st, LLM_EDATA, "'%s': no file holds %d tokens (seq_len + 1)", o->pattern, o->T + 1);
        globfree(&g);
        llm_data_free(d);
        return st->code;
    }
    globfree(&g);
    /* mix the seed once so that seeds 1, 2, 3 start far apart */
    uint64_t s = o->seed;
    d->pos.rng = llm_splitmix64(&s);
    d->pos.files = (uint64_t)d->nfiles;
    d->pos.tokens = d->ntok;
    d->pos.files_hash = d->files_hash;
    d->handed = d->pos;
    d->prefetch = o->prefetch;
    if (d->prefetch && start_thread(d)) {
        llm_data_free(d);
        return llm_err(st, LLM_ESOFTWARE, "cannot start the prefetch thread");
    }
    *out = d;
    return 0;
}

void llm_data_free(llm_data *d)
{
    if (!d)
        return;
    stop_thread(d);
    if (d->files) {
        for (int i = 0; i < d->nfiles; i++) {
            llm_tokfile_close(&d->files[i]);
            free(d->names[i]);
        }
        pthread_mutex_destroy(&d->mu);
        pthread_cond_destroy(&d->cv);
    }
    free(d->files);
    free(d->sb);
    free(d->names);
    free(d->starts);
    free(d->slot);
    free(d);
}

static void split(const llm_data *d, const int32_t *rows, int32_t *in, int32_t *tg)
{
    size_t T = (size_t)d->T, W = T + 1;
    for (int b = 0; b < d->B; b++) {
        memcpy(in + (size_t)b * T, rows + (size_t)b * W, T * sizeof *in);
        memcpy(tg + (size_t)b * T, rows + (size_t)b * W + 1, T * sizeof *tg);
    }
}

int llm_data_next(llm_data *d, int32_t *inputs, int32_t *targets, llm_status *st)
{
    double t0 = llm_now_s();
    int rc = 0;
    if (!d->prefetch) {
        llm_data_pos p = d->pos;
        bad_id bad;
        if (produce(d, &p, d->slot, &bad))
            rc = bad_err(d, &bad, st);
        else {
            split(d, d->slot, inputs, targets);
            d->pos = d->handed = p;
        }
    } else {
        pthread_mutex_lock(&d->mu);
        while (!d->full)
            pthread_cond_wait(&d->cv, &d->mu);
        if (d->slot_bad) {
            /* keep the slot: asking again gives the same error */
            rc = bad_err(d, &d->bad, st);
        } else {
            split(d, d->slot, inputs, targets);
            d->handed = d->slot_pos;
            d->full = 0;
            pthread_cond_broadcast(&d->cv);
        }
        pthread_mutex_unlock(&d->mu);
    }
    d->wait_s += llm_now_s() - t0;
    return rc;
}

llm_data_pos llm_data_tell(const llm_data *d)
{
    return d->handed;
}

int llm_data_seek(llm_data *d, const llm_data_pos *p, llm_status *st)
{
    if (p->file >= (uint64_t)d->nfiles || p->offset > d->files[p->file].ntok)
        return llm_err(st, LLM_EDATA, "data position (file %" PRIu64 ", offset %" PRIu64
                       ") is outside the %d data file(s)", p->file, p->offset, d->nfiles);
    int was = d->running;
    stop_thread(d);
    llm_data_pos q = *p;   /* of these files, whatever p says */
    q.files = (uint64_t)d->nfiles;
    q.tokens = d->ntok;
    q.files_hash = d->files_hash;
    d->pos = q;
    d->handed = q;
    if (was && start_thread(d))
        return llm_err(st, LLM_ESOFTWARE, "cannot start the prefetch thread");
    return 0;
}

int llm_data_nfiles(const llm_data *d) { return d->nfiles; }
uint64_t llm_data_ntok(const llm_data *d) { return d->ntok; }
double llm_data_wait_seconds(const llm_data *d) { return d->wait_s; }

int llm_data_files_differ(const llm_data *d, const llm_data_pos *p, char *why, size_t n)
{
    if (!p->files || (p->files == (uint64_t)d->nfiles && p->tokens == d->ntok &&
                      p->files_hash == d->files_hash))
        return 0;
    snprintf(why, n, "%d file(s) of %" PRIu64 " tokens now, %" PRIu64 " of %" PRIu64 " then%s",
             d->nfiles, d->ntok, p->files, p->tokens,
             p->files == (uint64_t)d->nfiles && p->tokens == d->ntok
                 ? ", under other names or with other lengths" : "");
    return 1;
}

static const char *pos_keys[] = {"rng", "file", "offset", "epoch", "batches",
                                 "files", "tokens", "files_hash"};

llm_node *llm_data_pos_node(const llm_data_pos *p)
{
    const uint64_t v[] = {p->rng, p->file, p->offset, p->epoch, p->batches,
                          p->files, p->tokens, p->files_hash};
    int nk = p->files ? 8 : 5;
    llm_node *m = llm_node_new_map();
    for (int i = 0; m && i < nk; i++) {
        char buf[32];
        snprintf(buf, sizeof buf, i == 7 ? "%016" PRIx64 : "%" PRIu64, v[i]);
        if (llm_node_set_str(m, pos_keys[i], buf)) {
            llm_node_free(m);
            return NULL;
        }
    }
    return m;
}

int llm_data_pos_parse(const llm_node *map, llm_data_pos *p, llm_status *st)
{
    uint64_t v[8] = {0};
    if (!map || map->kind != LLM_NODE_MAP)
        return llm_err(st, LLM_EDATA, "data position: not a mapping");
    /* the files (the last three) came later: all or none */
    int nk = llm_node_get(map, "files") || llm_node_get(map, "tokens") ||
             llm_node_get(map, "files_hash") ? 8 : 5;
    for (int i = 0; i < nk; i++) {
        const char *s = llm_node_str(llm_node_get(map, pos_keys[i]));
        char *end;
        errno = 0;
        if (!s || !*s || *s == '-' || *s == '+' || (i == 7 && strlen(s) != 16) ||
            (v[i] = strtoull(s, &end, i == 7 ? 16 : 10), errno || *end) || (i == 5 && !v[i]))
            return llm_err(st, LLM_EDATA, "data position: bad or missing '%s'", pos_keys[i]);
    }
    *p = (llm_data_pos){v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]};
    return 0;
}
