/* libFuzzer target for llm-infer --listen (common/infer_net.c): the line framing of what
 * socket clients send, over a Unix-domain socket in the scratch directory.  The first
 * byte picks the number of clients (1 + bits 0-1) and whether the last one hangs up
 * without reading its responses (bit 2); the rest is split at "\n%%%%\n" into parts, part
 * j sent by client j % clients, each followed by serving every whole line there is (as
 * llm_infer_run does while requests decode: next only when ready).  Then the clients
 * end their input; every non-blank line a client sent (a CR before its '\n' dropped, the
 * last one also without a '\n') must get exactly one response line, which must be a JSON
 * object with a finish_reason.  The fuzz build's LLM_INFER_MAX_LINE and read size are small
 * (Makefile: FZ_LIMITS), so that over-long lines and the buffer's moves are reached, and
 * so is the bound on the bytes received and not yet taken of all clients (set to MAX_IN):
 * past it, no client is read until whole lines are taken (served: no line may be lost or
 * wait for ever), and a line cut when the unfinished lines alone pass it gets one response
 * too (an error), also when it is blank, which no response would answer otherwise.
 * An over-long line's error names this build's limit. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "tests/fuzz/fuzz_util.h"

#include "common/infer_net.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NCLI 4
#define NPART 16
#define MAX_IN 600   /* bytes: two or three clients' lines near LLM_INFER_MAX_LINE */

typedef struct {
    int fd;
    char *got;          /* responses received */
    size_t n, cap;
    const uint8_t *sent[NPART];   /* its parts, in order */
    size_t sent_n[NPART];
    int nsent;
} client;

static llm_tokenizer *tok;

/* Take what the server sent c (without waiting). */
static void drain_client(client *c)
{
    for (;;) {
        if (c->fd < 0)
            return;
        if (c->cap - c->n < 4096) {
            c->cap = c->cap ? c->cap * 2 : 65536;
            c->got = realloc(c->got, c->cap);
            if (!c->got)
                abort();
        }
        ssize_t r = recv(c->fd, c->got + c->n, c->cap - c->n, MSG_DONTWAIT);
        if (r > 0) {
            c->n += (size_t)r;
            continue;
        }
        if (r < 0 && errno == EINTR)
            continue;
        return;   /* nothing now, or the server closed it */
    }
}

/* Serve every whole line the clients sent; returns the requests answered. */
static long serve(const llm_infer_io *io, client *cl, int ncli)
{
    long answered = 0;
    for (int guard = 0; guard < 100000; guard++) {
        for (int i = 0; i < ncli; i++)
            drain_client(&cl[i]);
        if (!io->ready(io->in))
            return answered;
        llm_status st;
        llm_infer_request req;
        memset(&req, 0, sizeof req);
        int r = io->next(io->in, &req, &st);
        if (r == LLM_INFER_NEXT_NONE)
            continue;
        if (r != 1)
            abort();   /* only the end of memory stops a server */
        const char *text = req.n_prompt ? "a\"\\\n\x01\xff" : "";
        llm_infer_result res = {.req = &req, .text = text, .text_len = strlen(text),
                                .finish_reason = req.error ? "error" : "length",
                                .error = req.error};
        if (io->done(io->out, &res, &st))
            abort();
        llm_infer_request_free(&req);
        answered++;
    }
    abort();   /* a line served over and over */
}

/* The request lines in a client's bytes: lines that are not blank (spaces and tabs after
 * a CR before the '\n' is dropped), the last one counted without its '\n' too, and every
 * line longer than LLM_INFER_MAX_LINE (its CR counted), answered with an error. */
static long lines_of(const client *c)
{
    long count = 0;
    int blank = 1;
    size_t len = 0;
    char prev = 0;
    for (int k = 0; k < c->nsent; k++)
        for (size_t i = 0; i < c->sent_n[k]; i++) {
            char ch = (char)c->sent[k][i];
            if (ch == '\n') {
                count += !blank || len > LLM_INFER_MAX_LINE;
                blank = 1, len = 0, prev = 0;
                continue;
            }
            /* a CR is part of the line unless it is the last byte before '\n' (or the end):
             * decided when the next byte comes */
            if (prev == '\r')
                blank = 0;
            if (ch != ' ' && ch != '\t' && ch != '\r')
                blank = 0;
            len++;
            prev = ch;
        }
    return count + (len && (!blank || len > LLM_INFER_MAX_LINE));
}

static size_t count_nl(const client *c)
{
    size_t k = 0;
    for (size_t i = 0; i < c->n; i++)
        k += c->got[i] == '\n';
    return k;
}

/* The responses to lines cut for the bound on unfinished lines (a '"' in a string is
 * escaped: only an "error" member has these bytes). */
static long cuts_of(const client *c)
{
    static const char cut[] = "\"error\":\"input line cut";
    long k = 0;
    for (const char *p = c->got, *end = c->got + c->n;
         p && (p = memmem(p, (size_t)(end - p), cut, sizeof cut - 1)); p += sizeof cut - 1)
        k++;
    return k;
}

/* An over-long line's error names the limit this build has (LLM_INFER_MAX_LINE), not
 * another's: every "input line longer than" in c's responses is followed by it. */
static void check_limit_said(const client *c)
{
    static const char said[] = "\"error\":\"input line longer than ";
    char want[64];
    unsigned lim = LLM_INFER_MAX_LINE;
    snprintf(want, sizeof want, lim % (1u << 20) ? "%u bytes\"" : "%u MiB\"",
             lim % (1u << 20) ? lim : lim >> 20);
    for (const char *p = c->got, *end = c->got + c->n;
         p && (p = memmem(p, (size_t)(end - p), said, sizeof said - 1)); p += sizeof said - 1)
        if ((size_t)(end - p) < sizeof said - 1 + strlen(want) ||
            memcmp(p + sizeof said - 1, want, strlen(want))) {
            fprintf(stderr, "an over-long line's error without the limit %s: %.80s\n", want, p);
            abort();
        }
}

/* The lines in a client's bytes, blank or not: at most that many are answered. */
static long all_lines_of(const client *c)
{
    long k = 1;
    for (int j = 0; j < c->nsent; j++)
        for (size_t i = 0; i < c->sent_n[j]; i++)
            k += c->sent[j][i] == '\n';
    return k;
}

/* Check c's responses: whole lines, each a JSON object with a finish_reason; returns
 * how many. */
static long responses_of(const client *c)
{
    long count = 0;
    size_t at = 0;
    while (at < c->n) {
        const char *nl = memchr(c->got + at, '\n', c->n - at);
        if (!nl) {
            fprintf(stderr, "a response without its newline: %.*s\n", (int)(c->n - at), c->got + at);
            abort();
        }
        size_t len = (size_t)(nl - (c->got + at));
        json_error_t e;
        json_t *j = json_loadb(c->got + at, len, JSON_ALLOW_NUL, &e);
        if (!j || !json_is_string(json_object_get(j, "finish_reason"))) {
            fprintf(stderr, "a response that is no response: %s: %.*s\n", j ? "" : e.text, (int)len,
                    c->got + at);
            abort();
        }
        json_decref(j);
        count++;
        at += len + 1;
    }
    return count;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    llm_status st;
    if (!tok && llm_tokenizer_byte(&tok, &st))
        abort();
    if (!size)
        return 0;
    int ncli = 1 + (data[0] & 3), hangup = (data[0] >> 2) & 1;
    const uint8_t *p[NPART];
    size_t n[NPART];
    int k = fz_split(data + 1, size - 1, p, n, NPART);

    llm_infer_source src = {.jsonl = 1, .tok = tok, .vocab = 300, .max_tokens = 16};
    src.sp.temperature = 1.0f;
    char addr[512], bound[600];
    snprintf(addr, sizeof addr, "unix:%s/s.sock", fz_dir());
    llm_infer_net *net = NULL;
    if (llm_infer_net_open(&net, addr, 0, &src, NULL, bound, sizeof bound, &st)) {
        fprintf(stderr, "%s\n", st.msg);
        abort();
    }
    llm_infer_net_set_max_in(net, MAX_IN);
    llm_infer_io io = llm_infer_net_io(net);

    client cl[NCLI];
    memset(cl, 0, sizeof cl);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", addr + 5);
    for (int i = 0; i < ncli; i++) {
        cl[i].fd = socket(AF_UNIX, SOCK_STREAM, 0);
        if (cl[i].fd < 0 || connect(cl[i].fd, (struct sockaddr *)&sa, sizeof sa))
            abort();
    }
    long served = 0;
    for (int j = 0; j < k; j++) {
        client *c = &cl[j % ncli];
        c->sent[c->nsent] = p[j], c->sent_n[c->nsent++] = n[j];
        size_t off = 0;
        while (off < n[j]) {   /* more than the socket holds: serve while sending */
            ssize_t w = send(c->fd, p[j] + off, n[j] - off, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (w > 0)
                off += (size_t)w;
            else if (w < 0 && (errno == EAGAIN || errno == EINTR))
                served += serve(&io, cl, ncli);
            else
                abort();
        }
        served += serve(&io, cl, ncli);
    }
    for (int i = 0; i < ncli; i++)
        shutdown(cl[i].fd, SHUT_WR);
    if (hangup && ncli > 1) {
        close(cl[ncli - 1].fd);
        cl[ncli - 1].fd = -1;
    }
    /* the ends of input (and the hangup) reach the server in a poll or two: serve until
     * every client that listens has its answers (or long past that; with lines cut, not
     * knowing which were blank, all 50 rounds) */
    long want = 0, want_all = 0;
    for (int i = 0; i < ncli; i++) {
        want_all += cl[i].fd >= 0 ? lines_of(&cl[i]) : all_lines_of(&cl[i]);
        want += cl[i].fd >= 0 ? lines_of(&cl[i]) : 0;
    }
    for (int t = 0; t < 50; t++) {
        served += serve(&io, cl, ncli);
        int all = 1;
        for (int i = 0; i < ncli; i++)
            if (cl[i].fd >= 0 && (long)count_nl(&cl[i]) < lines_of(&cl[i]) + cuts_of(&cl[i]))
                all = 0;
        if (all && t >= 2)
            break;
    }
    for (int i = 0; i < ncli; i++) {
        if (cl[i].fd < 0)
            continue;
        long got = responses_of(&cl[i]), sent = lines_of(&cl[i]), cuts = cuts_of(&cl[i]);
        check_limit_said(&cl[i]);
        if (got < sent || got > sent + cuts) {   /* a blank line cut is answered too */
            fprintf(stderr, "client %d: %ld request lines, %ld responses (%ld cut)\n", i, sent,
                    got, cuts);
            abort();
        }
        want_all += cuts;
    }
    if (served < want || served > want_all) {
        fprintf(stderr, "%ld request lines (%ld from clients that listen), %ld served\n", want_all,
                want, served);
        abort();
    }
    llm_infer_net_free(net);
    for (int i = 0; i < ncli; i++) {
        if (cl[i].fd >= 0)
            close(cl[i].fd);
        free(cl[i].got);
    }
    llm_infer_source_free(&src);
    return 0;
}
