/* llm-tokenize — text <-> token files (GPT-2 byte-level BPE, or raw bytes). */
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/cli.h"
#include "common/fsutil.h"
#include "common/log.h"
#include "common/status.h"
#include "common/tokenizer.h"
#include "common/tokfile.h"

#define PROG "llm-tokenize"

typedef struct {
    const char *out, *vocab, *vocab_dir, *format;
    int eot, split_docs, decode, count, threads, quiet, verbose;
    double val_fraction;
    llm_strlist files;
    llm_log lg;
} opts;

typedef struct {
    const char *name;
    char *p;
    size_t n;
    int mapped;
} input;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Read a whole input: regular files are mapped, pipes and stdin read into memory. */
static int input_read(input *in, const char *path, llm_status *st)
{
    memset(in, 0, sizeof *in);
    in->name = strcmp(path, "-") ? path : "<stdin>";
    int fd = strcmp(path, "-") ? open(path, O_RDONLY | O_CLOEXEC) : 0;
    if (fd < 0)
        return llm_err(st, LLM_ENOINPUT, "cannot open '%s': %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        close(fd);
        return llm_err(st, LLM_ENOINPUT, "'%s' is a directory", path);
    }
    if (fd > 0 && S_ISREG(sb.st_mode) && sb.st_size > 0) {
        void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        close(fd);
        if (m == MAP_FAILED)
            return llm_err(st, LLM_EIO, "cannot map '%s': %s", path, strerror(errno));
        in->p = m;
        in->n = (size_t)sb.st_size;
        in->mapped = 1;
        return LLM_OK;
    }
    size_t cap = 1 << 16;
    in->p = malloc(cap);
    for (;;) {
        if (!in->p) {
            if (fd > 0)
                close(fd);
            return llm_err(st, LLM_ENOMEM, "'%s': out of memory", in->name);
        }
        ssize_t r = read(fd, in->p + in->n, cap - in->n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;
            if (fd > 0)
                close(fd);
            free(in->p);
            in->p = NULL;
            return llm_err(st, LLM_EIO, "cannot read '%s': %s", in->name, strerror(e));
        }
        if (r == 0)
            break;
        in->n += (size_t)r;
        if (in->n == cap) {
            char *np = realloc(in->p, cap * 2);
            if (!np)
                free(in->p);
            in->p = np;
            cap *= 2;
        }
    }
    if (fd > 0)
        close(fd);
    return LLM_OK;
}

static void input_free(input *in)
{
    if (in->mapped)
        munmap(in->p, in->n);
    else
        free(in->p);
}

/* An output: stdout, or a temp file beside path renamed over it by sink_commit (fsync
 * first), so that a failed run leaves nothing behind; a device or pipe at path is
 * written in place (direct: a rename would replace it with a file). */
typedef struct {
    const char *path;
    char *tmp;
    int fd, direct;
    char target[PATH_MAX];
} sink;

static int sink_open(sink *k, const char *path, llm_status *st)
{
    k->path = path;
    k->tmp = NULL;
    k->fd = 1;
    k->direct = 0;
    if (!strcmp(path, "-"))
        return LLM_OK;
    int dfd;
    if (llm_out_target(path, k->target, sizeof k->target, &dfd, st))
        return st->code;
    if (dfd >= 0) {   /* a device or pipe: written in place, like stdout */
        k->fd = dfd;
        k->direct = 1;
        return LLM_OK;
    }
    k->path = path = k->target;
    size_t pl = strlen(path);
    if (!(k->tmp = malloc(pl + 16)))
        return llm_err(st, LLM_ENOMEM, "out of memory");
    snprintf(k->tmp, pl + 16, "%s.tmp.XXXXXX", path);
    k->fd = mkstemp(k->tmp);
    if (k->fd < 0) {
        free(k->tmp);
        k->tmp = NULL;
        return llm_err(st, LLM_EIO, "cannot create '%s': %s", path, strerror(errno));
    }
    return LLM_OK;
}

static int sink_write(sink *k, const char *buf, size_t n, llm_status *st)
{
    while (n) {
        ssize_t w = write(k->fd, buf, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return llm_err(st, LLM_EIO, "cannot write %s'%s': %s", k->fd != 1 ? "" : "to ",
                           k->fd != 1 ? k->path : "stdout", strerror(errno));
        buf += w;
        n -= (size_t)w;
    }
    return LLM_OK;
}

static void sink_abort(sink *k)
{
    if (k->direct) {
        close(k->fd);
        k->direct = 0;
    }
    if (k->tmp) {
        close(k->fd);
        unlink(k->tmp);
        free(k->tmp);
        k->tmp = NULL;
    }
}

static int sink_commit(sink *k, llm_status *st)
{
    if (k->direct) {
        k->direct = 0;
        if (close(k->fd))
            return llm_err(st, LLM_EIO, "cannot write '%s': %s", k->path, strerror(errno));
        return LLM_OK;
    }
    if (!k->tmp)
        return LLM_OK;
    int rc = LLM_OK;
    if (fchmod(k->fd, 0644) || fsync(k->fd))
        rc = llm_err(st, LLM_EIO, "cannot write '%s': %s", k->path, strerror(errno));
    if (close(k->fd) && !rc)
        rc = llm_err(st, LLM_EIO, "cannot write '%s': %s", k->path, strerror(errno));
    if (!rc && rename(k->tmp, k->path))
        rc = llm_err(st, LLM_EIO, "cannot rename to '%s': %s", k->path, strerror(errno));
    if (rc) {
        unlink(k->tmp);
    } else {
        char *d = strdup(k->path);
        int dfd = d ? open(dirname(d), O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
        free(d);
    }
    free(k->tmp);
    k->tmp = NULL;
    return rc;
}

static int write_out(const char *path, const char *buf, size_t n, llm_status *st)
{
    sink k;
    int rc = sink_open(&k, path, st);
    if (!rc)
        rc = sink_write(&k, buf, n, st);
    if (!rc)
        rc = sink_commit(&k, st);
    else
        sink_abort(&k);
    return rc;
}

/* ids as decimal text, space separated, one trailing newline. */
static int ids_to_text(const uint32_t *v, size_t n, char **out, size_t *len, llm_status *st)
{
    char *buf = malloc(n * 11 + 2), *p = buf;
    if (!buf)
        return llm_err(st, LLM_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        char tmp[11];
        int k = 0;
        uint32_t x = v[i];
        do
            tmp[k++] = (char)('0' + x % 10);
        while ((x /= 10));
        if (i)
            *p++ = ' ';
        while (k)
            *p++ = tmp[--k];
    }
    *p++ = '\n';
    *out = buf;
    *len = (size_t)(p - buf);
    return LLM_OK;
}

/* Parse whitespace-separated decimal ids (--format ids input). */
static int text_to_ids(const input *in, llm_ids *ids, llm_status *st)
{
    const char *p = in->p, *e = in->p + in->n;
    while (p < e) {
        if (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') {
            p++;
            continue;
        }
        uint64_t v = 0;
        const char *s = p;
        while (p < e && *p >= '0' && *p <= '9' && v <= UINT32_MAX)
            v = v * 10 + (uint64_t)(*p++ - '0');
        if (p == s || v > UINT32_MAX || (p < e && !strchr(" \n\t\r", *p)))
            return llm_err(st, LLM_EDATA, "'%s': byte %zu: not a token id", in->name, (size_t)(s - in->p));
        if (llm_ids_push(ids, (uint32_t)v))
            return llm_err(st, LLM_ENOMEM, "out of memory");
    }
    return LLM_OK;
}

/* Documents: each input, or with --split-docs each block ending in a run of blank lines
 * (the blank lines stay with the block they end, so the text is unchanged). */
static int split_docs(const opts *o, const input *in, int nin, const char ***texts, size_t **lens,
                      size_t *ndocs)
{
    size_t cap = (size_t)nin + 16, n = 0;
    const char **t = malloc(cap * sizeof *t);
    size_t *l = malloc(cap * sizeof *l);
    if (!t || !l)
        goto oom;
    for (int f = 0; f < nin; f++) {
        const char *start = in[f].p, *e = in[f].p + in[f].n;
        for (;;) {
            const char *cut = e, *q = start;
            while (o->split_docs && q < e && (q = memchr(q, '\n', (size_t)(e - q)))) {
                const char *r = q + 1;
                int nl = 1;
                while (r < e && (*r == '\n' || (*r == '\r' && r + 1 < e && r[1] == '\n')))
                    nl += *r++ == '\n';
                if (nl >= 2 && r < e) {
                    cut = r;
                    break;
                }
                q = r;
            }
            if (n == cap) {
                cap *= 2;
                const char **nt = realloc(t, cap * sizeof *t);
                if (!nt)
                    goto oom;
                t = nt;
                size_t *nl = realloc(l, cap * sizeof *l);
                if (!nl)
                    goto oom;
                l = nl;
            }
            t[n] = start;
            l[n++] = (size_t)(cut - start);
            if (cut == e)
                break;
            start = cut;
        }
    }
    *texts = t;
    *lens = l;
    *ndocs = n;
    return 0;
oom:
    free(t);
    free(l);
    return -1;
}

static int write_split(const opts *o, const llm_ids *ids, const size_t *starts, size_t ndocs,
                       llm_status *st)
{
    if (ids->n < 2)
        return llm_err(st, LLM_EDATA, "%zu tokens: too few to split into train and val", ids->n);
    size_t nval = (size_t)(o->val_fraction * (double)ids->n + 0.5);
    if (nval < 1)
        nval = 1;
    if (nval >= ids->n)
        nval = ids->n - 1;
    size_t cut = ids->n - nval, best = 0;
    /* the document start nearest to the wanted cut, when there are documents */
    for (size_t d = 1; d < ndocs; d++) {
        size_t s = starts[d];
        if (s == 0 || s >= ids->n)
            continue;
        size_t dist = s > cut ? s - cut : cut - s, bd = best > cut ? best - cut : cut - best;
        if (!best || dist < bd)
            best = s;
    }
    if (best)
        cut = best;
    char train[4096], val[4096];
    if (snprintf(train, sizeof train, "%s_train.bin", o->out) >= (int)sizeof train ||
        snprintf(val, sizeof val, "%s_val.bin", o->out) >= (int)sizeof val)
        return llm_err(st, LLM_EUSAGE, "output prefix too long");
    int existed = access(train, F_OK) == 0;
    int rc = llm_tokfile_write(train, ids->v, cut, 0, st);
    if (!rc) {
        rc = llm_tokfile_write(val, ids->v + cut, ids->n - cut, 0, st);
        if (rc && !existed)
            unlink(train); /* no half-written pair */
    }
    if (!rc)
        llm_info(&o->lg, "%s: %zu tokens, %s: %zu tokens", train, cut, val, ids->n - cut);
    return rc;
}

static int run_encode(const opts *o, const llm_tokenizer *t, llm_status *st)
{
    int nin = o->files.n ? o->files.n : 1;
    input *in = calloc((size_t)nin, sizeof *in);
    const char **texts = NULL;
    size_t *lens = NULL, *starts = NULL, ndocs = 0, bytes = 0;
    llm_ids ids = {0};
    char *txt = NULL;
    int rc = in ? LLM_OK : llm_err(st, LLM_ENOMEM, "out of memory"), got = 0;
    for (; got < nin && !rc; got++) {
        rc = input_read(&in[got], o->files.n ? o->files.v[got] : "-", st);
        if (rc)
            break;
        bytes += in[got].n;
    }
    if (rc)
        goto done;
    if (split_docs(o, in, nin, &texts, &lens, &ndocs) ||
        !(starts = malloc((ndocs ? ndocs : 1) * sizeof *starts))) {
        rc = llm_err(st, LLM_ENOMEM, "out of memory");
        goto done;
    }
    double t0 = now();
    rc = llm_tokenizer_encode_docs(t, texts, lens, ndocs, o->eot, o->threads, &ids, starts, st);
    if (rc)
        goto done;
    double dt = now() - t0;
    llm_debug(&o->lg, "encoded %zu bytes in %zu document(s) into %zu tokens in %.3f s (%.1f MB/s, %d thread(s))",
              bytes, ndocs, ids.n, dt, dt > 0 ? bytes / 1e6 / dt : 0.0, o->threads);
    if (o->count) {
        printf("%zu\n", ids.n);
        if (fflush(stdout))
            rc = llm_err(st, LLM_EIO, "cannot write to stdout: %s", strerror(errno));
    } else if (o->val_fraction > 0) {
        rc = write_split(o, &ids, starts, ndocs, st);
    } else if (!strcmp(o->format, "ids")) {
        size_t n = 0;
        rc = ids_to_text(ids.v, ids.n, &txt, &n, st);
        if (!rc)
            rc = write_out(o->out, txt, n, st);
    } else {
        rc = llm_tokfile_write(o->out, ids.v, ids.n, 0, st);
    }
done:
    for (int i = 0; i < got; i++)
        input_free(&in[i]);
    free(in);
    free(texts);
    free(lens);
    free(starts);
    free(txt);
    llm_ids_free(&ids);
    return rc;
}

#define DECODE_CHUNK (1u << 16)

/* Decode: every input is opened and checked first (ids against the vocabulary), then
 * the text is produced a chunk at a time, so memory stays small for big token files. */
static int run_decode(const opts *o, const llm_tokenizer *t, llm_status *st)
{
    int nin = o->files.n ? o->files.n : 1, vocab = llm_tokenizer_vocab_size(t), ids_fmt = !strcmp(o->format, "ids");
    llm_tokfile *tf = calloc((size_t)nin, sizeof *tf);
    llm_ids *tx = calloc((size_t)nin, sizeof *tx);
    uint32_t *chunk = malloc(DECODE_CHUNK * sizeof *chunk);
    int rc = tf && tx && chunk ? LLM_OK : llm_err(st, LLM_ENOMEM, "out of memory"), got = 0;
    uint64_t total = 0;
    for (; got < nin && !rc; got++) {
        const char *path = o->files.n ? o->files.v[got] : "-";
        if (ids_fmt) {
            input in;
            rc = input_read(&in, path, st);
            if (rc)
                break;
            rc = text_to_ids(&in, &tx[got], st);
            for (size_t k = 0; k < tx[got].n && !rc; k++)
                if (tx[got].v[k] >= (uint32_t)vocab)
                    rc = llm_err(st, LLM_EDATA, "'%s': token %zu has id %u, out of range for vocabulary size %d",
                                 in.name, k, tx[got].v[k], vocab);
            input_free(&in);
            total += tx[got].n;
        } else {
            rc = llm_tokfile_open(&tf[got], path, vocab, st);
            if (rc)
                break;
            total += tf[got].ntok;
        }
    }
    if (!rc && o->count) {
        printf("%llu\n", (unsigned long long)total);
        if (fflush(stdout))
            rc = llm_err(st, LLM_EIO, "cannot write to stdout: %s", strerror(errno));
    } else if (!rc) {
        sink k;
        double t0 = now(), busy = 0;
        uint64_t bytes = 0;
        rc = sink_open(&k, o->out, st);
        for (int i = 0; i < nin && !rc; i++) {
            uint64_t n = ids_fmt ? tx[i].n : tf[i].ntok;
            for (uint64_t at = 0; at < n && !rc; at += DECODE_CHUNK) {
                size_t m = n - at < DECODE_CHUNK ? (size_t)(n - at) : DECODE_CHUNK;
                const uint32_t *v = chunk;
                if (ids_fmt)
                    v = tx[i].v + at;
                else
                    for (size_t j = 0; j < m; j++)
                        chunk[j] = llm_tokfile_at(&tf[i], at + j);
                char *text;
                size_t len;
                double t1 = now();
                rc = llm_tokenizer_decode(t, v, m, &text, &len, st);
                busy += now() - t1;
                if (!rc) {
                    rc = sink_write(&k, text, len, st);
                    bytes += len;
                    free(text);
                }
            }
        }
        if (!rc)
            rc = sink_commit(&k, st);
        else
            sink_abort(&k);
        llm_debug(&o->lg, "decoded %llu tokens into %llu bytes in %.3f s (%.1f MB/s; %.3f s in all)",
                  (unsigned long long)total, (unsigned long long)bytes, busy,
                  busy > 0 ? bytes / 1e6 / busy : 0.0, now() - t0);
    }
    for (int i = 0; i < nin && tf && tx; i++) {
        if (tf[i].base)
            llm_tokfile_close(&tf[i]);
        llm_ids_free(&tx[i]);
    }
    free(tf);
    free(tx);
    free(chunk);
    return rc;
}

int main(int argc, char **argv)
{
    opts o = {.out = NULL, .vocab = "gpt2", .format = "bin", .threads = 0};
    const llm_opt table[] = {
        {"output", 'o', LLM_OPT_STR, &o.out, "FILE",
         "output file, - for stdout (default: -); with --val-fraction the PREFIX"},
        {"vocab", 0, LLM_OPT_STR, &o.vocab, "NAME", "gpt2, byte, or a MODEL.llmk file (default: gpt2)"},
        {"vocab-dir", 0, LLM_OPT_STR, &o.vocab_dir, "DIR",
         "folder with encoder.json and vocab.bpe (default: $LLMKIT_DATA/gpt2)"},
        {"format", 0, LLM_OPT_STR, &o.format, "FMT", "bin (token file) or ids (decimal text) (default: bin)"},
        {"eot", 0, LLM_OPT_FLAG, &o.eot, NULL, "put the end-of-text token before each document"},
        {"split-docs", 0, LLM_OPT_FLAG, &o.split_docs, NULL, "blank lines also separate documents"},
        {"val-fraction", 0, LLM_OPT_DOUBLE, &o.val_fraction, "F",
         "write PREFIX_train.bin and PREFIX_val.bin, the last F of the tokens to val"},
        {"decode", 'd', LLM_OPT_FLAG, &o.decode, NULL, "decode token files (or --format ids) to text"},
        {"count", 0, LLM_OPT_FLAG, &o.count, NULL, "print only the number of tokens"},
        {"threads", 'j', LLM_OPT_INT, &o.threads, "N", "encoding threads (default: 0 = one per CPU, at most 8)"},
        {"quiet", 'q', LLM_OPT_FLAG, &o.quiet, NULL, "print errors only"},
        {"verbose", 'v', LLM_OPT_COUNT, &o.verbose, NULL, "print more (timings with -v)"},
        {0},
    };
    static const llm_env env[] = {
        {"LLMKIT_DATA", "data folder: the GPT-2 vocabulary is looked for in its gpt2/"},
        {0},
    };
    const llm_cli cli = {PROG, "[options] [FILE|-]...",
                         "Encode text into token files (GPT-2 BPE or bytes), or decode them back.",
                         table, 0, -1, env};
    int r = llm_cli_parse(&cli, argc, argv, &o.files);
    if (r != LLM_CLI_RUN) {
        llm_strlist_free(&o.files);
        return r == LLM_CLI_EXIT ? 0 : 64;
    }
    llm_cli_quiet_sigpipe();
    o.lg = llm_log_make(PROG, o.quiet, o.verbose);
    const char *bad = NULL;
    if (strcmp(o.format, "bin") && strcmp(o.format, "ids"))
        bad = "--format must be bin or ids";
    else if (o.threads < 0 || o.threads > 256)
        bad = "--threads must be 0..256";
    else if (o.val_fraction < 0 || o.val_fraction >= 1)
        bad = "--val-fraction must be in (0, 1)";
    else if (o.val_fraction > 0 && (o.decode || o.count || !strcmp(o.format, "ids")))
        bad = "--val-fraction only goes with encoding to token files";
    else if (o.val_fraction > 0 && (!o.out || !strcmp(o.out, "-")))
        bad = "--val-fraction needs -o PREFIX";
    else if (o.count && o.out)
        bad = "--count prints the count only; drop -o";
    else if (o.decode && (o.eot || o.split_docs))
        bad = "--eot and --split-docs are for encoding";
    if (bad) {
        fprintf(stderr, "%s: %s (try '%s --help')\n", PROG, bad, PROG);
        llm_strlist_free(&o.files);
        return 64;
    }
    if (!o.out)
        o.out = "-";
    if (!o.decode && !o.count && !o.val_fraction && !strcmp(o.format, "bin") && !strcmp(o.out, "-") &&
        isatty(1)) {
        fprintf(stderr, "%s: not writing a binary token file to a terminal; use -o FILE or --format ids\n", PROG);
        llm_strlist_free(&o.files);
        return 64;
    }
    if (o.threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        o.threads = n > 0 ? (n > 8 ? 8 : (int)n) : 1;
    }

    llm_status st = {0};
    llm_tokenizer *t = NULL;
    int rc = llm_tokenizer_load(&t, o.vocab, o.vocab_dir, &st);
    if (!rc)
        rc = o.decode ? run_decode(&o, t, &st) : run_encode(&o, t, &st);
    llm_tokenizer_free(t);
    llm_strlist_free(&o.files);
    if (rc) {
        if (rc == LLM_EIO && llm_cli_stdout_closed(errno))
            return 0;
        llm_error(&o.lg, "%s", st.msg);
        return llm_exit_code(rc);
    }
    return 0;
}
