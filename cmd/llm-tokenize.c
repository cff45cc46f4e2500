/* llm-tokenize — text <-> token files (GPT-2 byte-level BPE, or raw bytes). */
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/cli.h"
#include "common/afile.h"
#include "common/env.h"
#include "common/log.h"
#include "common/status.h"
#include "common/tokenizer.h"
#include "common/tokfile.h"
#include "common/tokout.h"

#define PROG "llm-tokenize"

typedef struct {
    const char *out, *vocab, *vocab_dir, *format, *shard_arg;
    int eot, split_docs, decode, count, threads, quiet, verbose;
    double val_fraction;
    int64_t shard_tokens;
    llm_strlist files;
    llm_log lg;
} opts;

typedef struct {
    const char *name;
    char *p;
    size_t n;
    int mapped;
} input;

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

/* White space between decimal ids: isspace's set in the C locale. */
static int id_sep(char c)
{
    return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

/* Parse up to max whitespace-separated decimal ids (--format ids input) from *pos into
 * out, *n of them; *pos moves past them.  Ids at or above vocab are refused. */
static int parse_ids(const input *in, size_t *pos, uint32_t *out, size_t max, size_t *n,
                     int vocab, llm_status *st)
{
    const char *p = in->p + *pos, *e = in->p + in->n;
    size_t k = 0;
    while (p < e && k < max) {
        if (id_sep(*p)) {
            p++;
            continue;
        }
        uint64_t v = 0;
        const char *s = p;
        while (p < e && *p >= '0' && *p <= '9' && v <= UINT32_MAX)
            v = v * 10 + (uint64_t)(*p++ - '0');
        if (p == s || v > UINT32_MAX || (p < e && !id_sep(*p)))
            return llm_err(st, LLM_EDATA, "'%s': byte %zu: not a token id", in->name, (size_t)(s - in->p));
        if (v >= (uint64_t)vocab)
            return llm_err(st, LLM_EDATA, "'%s': byte %zu: id %llu is out of range for vocabulary "
                           "size %d", in->name, (size_t)(s - in->p), (unsigned long long)v, vocab);
        out[k++] = (uint32_t)v;
    }
    *pos = (size_t)(p - in->p);
    *n = k;
    return LLM_OK;
}

/* Feed one input to the encoder, 1 MiB at a time (files, pipes and stdin alike). */
static int feed_input(llm_encoder *e, const char *path, char *buf, size_t cap, llm_status *st)
{
    const char *name = strcmp(path, "-") ? path : "<stdin>";
    int fd = strcmp(path, "-") ? open(path, O_RDONLY | O_CLOEXEC) : 0;
    if (fd < 0)
        return llm_err(st, LLM_ENOINPUT, "cannot open '%s': %s", path, strerror(errno));
    struct stat sb;
    int rc = LLM_OK;
    if (fstat(fd, &sb) == 0 && S_ISDIR(sb.st_mode))
        rc = llm_err(st, LLM_ENOINPUT, "'%s' is a directory", path);
    while (!rc) {
        ssize_t r = read(fd, buf, cap);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            rc = llm_err(st, LLM_EIO, "cannot read '%s': %s", name, strerror(errno));
        else if (r == 0)
            break;
        else
            rc = llm_encoder_feed(e, buf, (size_t)r, st);
    }
    if (fd > 0)
        close(fd);
    return rc ? rc : llm_encoder_end_input(e, st);
}

/* Encode: the inputs stream through a window (LLM_TOKENIZE_WINDOW bytes; default
 * 16 MiB), and the ids go out as they come. */
static int run_encode(const opts *o, const llm_tokenizer *t, uint64_t window, llm_status *st)
{
    llm_tokout_spec spec = {LLM_TOKOUT_FILE, o->out, o->val_fraction, (uint64_t)o->shard_tokens};
    if (o->count)
        spec.kind = LLM_TOKOUT_COUNT;
    else if (!strcmp(o->format, "ids"))
        spec.kind = LLM_TOKOUT_TEXT;
    else if (o->val_fraction > 0)
        spec.kind = LLM_TOKOUT_SPLIT;
    else if (o->shard_tokens > 0)
        spec.kind = LLM_TOKOUT_SHARDS;
    size_t cap = 1 << 20;
    char *buf = malloc(cap);
    llm_encoder *e = NULL;
    llm_tokout *out = NULL;
    int rc = buf ? LLM_OK : llm_err(st, LLM_ENOMEM, "out of memory");
    /* a missing input fails before any output (stdout included) is written */
    for (int i = 0; i < o->files.n && !rc; i++) {
        const char *path = o->files.v[i];
        struct stat sb;
        if (strcmp(path, "-") && stat(path, &sb) != 0)
            rc = llm_err(st, LLM_ENOINPUT, "cannot open '%s': %s", path, strerror(errno));
        else if (strcmp(path, "-") && S_ISDIR(sb.st_mode))
            rc = llm_err(st, LLM_ENOINPUT, "'%s' is a directory", path);
    }
    if (!rc)
        rc = llm_tokout_open(&out, &spec, st);
    if (!rc)
        rc = llm_encoder_new(&e, t, o->eot, o->split_docs, o->threads, window, llm_tokout_put, out, st);
    if (!rc && spec.kind == LLM_TOKOUT_SPLIT)
        llm_encoder_keep_starts(e);   /* the val cut goes to a document start */
    double t0 = llm_now_s();
    for (int i = 0; i < (o->files.n ? o->files.n : 1) && !rc; i++)
        rc = feed_input(e, o->files.n ? o->files.v[i] : "-", buf, cap, st);
    double dt = llm_now_s() - t0;
    if (!rc) {
        size_t ndocs;
        llm_encoder_doc_starts(e, &ndocs);
        uint64_t bytes = llm_encoder_bytes(e), ntok = llm_encoder_tokens(e);
        llm_debug(&o->lg, "encoded %llu bytes in %zu document(s) into %llu tokens in %.3f s "
                  "(%.1f MB/s, %d thread(s))", (unsigned long long)bytes, ndocs,
                  (unsigned long long)ntok, dt, dt > 0 ? bytes / 1e6 / dt : 0.0, o->threads);
        char summary[PATH_MAX * 2 + 128];
        rc = llm_tokout_commit(out, e, summary, sizeof summary, st);
        out = NULL;
        if (!rc && spec.kind == LLM_TOKOUT_COUNT) {
            printf("%llu\n", (unsigned long long)ntok);
            if (fflush(stdout))
                rc = llm_err(st, LLM_EIO, "cannot write to stdout: %s", strerror(errno));
        } else if (!rc && (spec.kind == LLM_TOKOUT_SPLIT || spec.kind == LLM_TOKOUT_SHARDS)) {
            llm_info(&o->lg, "%s", summary);
        }
    }
    llm_tokout_abort(out);
    llm_encoder_free(e);
    free(buf);
    return rc;
}

#define DECODE_CHUNK (1u << 16)

/* Decode: every input is opened and checked first (ids against the vocabulary; text ids
 * parsed once to check them, and again as they are decoded), then the text is produced a
 * chunk at a time, so memory stays small for big token files.  No text window
 * (LLM_TOKENIZE_WINDOW): files are mapped, and a pipe is read whole because its ids are
 * checked before anything is written; the text is made DECODE_CHUNK ids at a time. */
static int run_decode(const opts *o, const llm_tokenizer *t, llm_status *st)
{
    int nin = o->files.n ? o->files.n : 1, vocab = llm_tokenizer_vocab_size(t), ids_fmt = !strcmp(o->format, "ids");
    llm_tokfile *tf = calloc((size_t)nin, sizeof *tf);
    input *tx = calloc((size_t)nin, sizeof *tx);
    uint32_t *chunk = malloc(DECODE_CHUNK * sizeof *chunk);
    int rc = tf && tx && chunk ? LLM_OK : llm_err(st, LLM_ENOMEM, "out of memory"), got = 0;
    uint64_t total = 0;
    for (; got < nin && !rc; got++) {
        const char *path = o->files.n ? o->files.v[got] : "-";
        if (ids_fmt) {
            rc = input_read(&tx[got], path, st);
            for (size_t pos = 0, m = 1; !rc && m; total += m)
                rc = parse_ids(&tx[got], &pos, chunk, DECODE_CHUNK, &m, vocab, st);
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
        llm_afile k;
        double t0 = llm_now_s(), busy = 0;
        uint64_t bytes = 0;
        rc = llm_afile_open(&k, o->out, LLM_AFILE_STDOUT, st);
        int opened = !rc;
        for (int i = 0; i < nin && !rc; i++) {
            uint64_t n = ids_fmt ? UINT64_MAX : tf[i].ntok;
            size_t pos = 0;
            for (uint64_t at = 0; at < n && !rc; at += DECODE_CHUNK) {
                size_t m = n - at < DECODE_CHUNK ? (size_t)(n - at) : DECODE_CHUNK;
                if (ids_fmt) {
                    if ((rc = parse_ids(&tx[i], &pos, chunk, DECODE_CHUNK, &m, vocab, st)) || !m)
                        break;
                } else {
                    for (size_t j = 0; j < m; j++)
                        chunk[j] = llm_tokfile_at(&tf[i], at + j);
                }
                char *text;
                size_t len;
                double t1 = llm_now_s();
                rc = llm_tokenizer_decode(t, chunk, m, &text, &len, st);
                busy += llm_now_s() - t1;
                if (!rc) {
                    rc = llm_afile_put(&k, text, len, st);
                    bytes += len;
                    free(text);
                }
            }
        }
        if (!rc)
            rc = llm_afile_commit(&k, st);
        else if (opened)
            llm_afile_abort(&k);
        llm_debug(&o->lg, "decoded %llu tokens into %llu bytes in %.3f s (%.1f MB/s; %.3f s in all)",
                  (unsigned long long)total, (unsigned long long)bytes, busy,
                  busy > 0 ? bytes / 1e6 / busy : 0.0, llm_now_s() - t0);
    }
    for (int i = 0; i < nin && tf && tx; i++) {
        if (tf[i].base)
            llm_tokfile_close(&tf[i]);
        if (tx[i].p)
            input_free(&tx[i]);
    }
    free(tf);
    free(tx);
    free(chunk);
    return rc;
}

int main(int argc, char **argv)
{
    /* NAN: --val-fraction not given (the parser takes finite numbers only, so 0 is refused);
     * --shard-tokens is taken as text, since every int64 can be typed (INT64_MIN meant "not
     * given" once) and parsed below */
    opts o = {.out = NULL, .vocab = "gpt2", .format = "bin", .threads = 0,
              .val_fraction = NAN};
    const llm_opt table[] = {
        {"output", 'o', LLM_OPT_STR, &o.out, "FILE",
         "output file, - for stdout (default: -); with --val-fraction or --shard-tokens the PREFIX"},
        {"vocab", 0, LLM_OPT_STR, &o.vocab, "NAME", "gpt2, byte, or a MODEL.llmk file (default: gpt2)"},
        {"vocab-dir", 0, LLM_OPT_STR, &o.vocab_dir, "DIR",
         "folder with encoder.json and vocab.bpe (default: the first of $LLMKIT_DATA/gpt2, $LLM_DATA/gpt2, ./data/gpt2 that has them)"},
        {"format", 0, LLM_OPT_STR, &o.format, "FMT", "bin (token file) or ids (decimal text) (default: bin)"},
        {"eot", 0, LLM_OPT_FLAG, &o.eot, NULL, "put the end-of-text token before each document"},
        {"split-docs", 0, LLM_OPT_FLAG, &o.split_docs, NULL, "blank lines also separate documents"},
        {"val-fraction", 0, LLM_OPT_DOUBLE, &o.val_fraction, "F",
         "write PREFIX_train.bin and PREFIX_val.bin, the last F of the tokens to val"},
        {"shard-tokens", 0, LLM_OPT_STR, &o.shard_arg, "N",
         "write PREFIX_000000.bin, PREFIX_000001.bin, ... of N tokens each (1..2147483647; 1000000 shards at most)"},
        {"decode", 'd', LLM_OPT_FLAG, &o.decode, NULL, "decode token files (or --format ids) to text"},
        {"count", 0, LLM_OPT_FLAG, &o.count, NULL, "print only the number of tokens"},
        {"threads", 'j', LLM_OPT_INT, &o.threads, "N", "encoding threads (default: 0 = one per CPU, at most 8)"},
        {"quiet", 'q', LLM_OPT_FLAG, &o.quiet, NULL, "print errors only"},
        {"verbose", 'v', LLM_OPT_COUNT, &o.verbose, NULL, "print more (timings with -v)"},
        {0},
    };
    static const llm_env env[] = {
        {"LLMKIT_DATA", "data folder: the GPT-2 vocabulary is looked for in its gpt2/"},
        {"LLM_DATA", "data folder searched next (then ./data)"},
        {"LLM_TOKENIZE_WINDOW", "bytes of text held before encoding (default 16777216; encoding only)"},
        {"LLM_FAULT_WRITE_LIMIT", "test hook: writing past byte N of an output fails as on a full disk"},
        {"LLM_FAULT_RENAME", "test hook: putting an output whose name ends in this in place fails"},
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
    llm_afile_remove_on_signal();
    o.lg = llm_log_make(PROG, o.quiet, o.verbose);
    const char *bad = NULL;
    int has_val = !isnan(o.val_fraction);
    if (!has_val)
        o.val_fraction = 0;
    if (strcmp(o.format, "bin") && strcmp(o.format, "ids"))
        bad = "--format must be bin or ids";
    else if (o.threads < 0 || o.threads > 256)
        bad = "--threads must be 0..256";
    else if (has_val && !(o.val_fraction > 0 && o.val_fraction < 1))
        bad = "--val-fraction must be in (0, 1)";
    else if (o.val_fraction > 0 && (o.decode || o.count || !strcmp(o.format, "ids")))
        bad = "--val-fraction only goes with encoding to token files";
    else if (o.val_fraction > 0 && (!o.out || !strcmp(o.out, "-")))
        bad = "--val-fraction needs -o PREFIX";
    else if (o.shard_arg && llm_parse_i64_range(o.shard_arg, 1, LLM_TOKFILE_MAX_TOKENS, &o.shard_tokens))
        bad = "--shard-tokens must be an integer, 1..2147483647 (llm.c reads a file's count as an int)";
    else if (o.shard_tokens > 0 && (o.decode || o.count || o.val_fraction > 0 || !strcmp(o.format, "ids")))
        bad = "--shard-tokens only goes with encoding to token files, without --val-fraction";
    else if (o.shard_tokens > 0 && (!o.out || !strcmp(o.out, "-")))
        bad = "--shard-tokens needs -o PREFIX";
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
    /* the encoder's window, refused when bad for -d too (which has none): every variable
     * the page lists is read strictly, whatever the mode */
    uint64_t window = 0;
    int rc = llm_env_u64("LLM_TOKENIZE_WINDOW", 1, (uint64_t)1 << 40, &window, &st);
    int no_vocab = 0;  /* GPT-2's files not where the default looks: say where to get them */
    if (!rc) {
        rc = llm_tokenizer_load(&t, o.vocab, o.vocab_dir, &st);
        no_vocab = rc == LLM_ENOINPUT && !strcmp(o.vocab, "gpt2") && !o.vocab_dir;
    }
    if (!rc)
        rc = o.decode ? run_decode(&o, t, &st) : run_encode(&o, t, window, &st);
    llm_tokenizer_free(t);
    llm_strlist_free(&o.files);
    if (rc) {
        if (rc == LLM_EIO && llm_cli_stdout_closed(errno))
            return 0;
        llm_error(&o.lg, "%s", st.msg);
        if (no_vocab)
            llm_error(&o.lg, "the GPT-2 vocabulary (encoder.json, vocab.bpe) is looked for in "
                      "$LLMKIT_DATA/gpt2, $LLM_DATA/gpt2, then ./data/gpt2: fetch it with scripts/get-data.sh, "
                      "point LLMKIT_DATA or --vocab-dir at it, or use --vocab byte");
        return llm_exit_code(rc);
    }
    return 0;
}
