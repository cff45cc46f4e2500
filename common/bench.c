/* bench.c — the benchmark result schema, its writers and the timing loop. */
#include "common/bench.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/afile.h"
#include "common/json.h"
#include "common/version.h"
#include "kernels/cpu/quant_kern.h"

/* OpenBLAS's name of the kernel set it chose (OPENBLAS_CORETYPE can force one); declared
 * here: <cblas.h> may be another vendor's. */
char *openblas_get_corename(void);

int llm_bench_format_parse(const char *name, llm_bench_format *out)
{
    static const struct { const char *n; llm_bench_format f; } t[] = {
        {"table", LLM_BENCH_TABLE}, {"csv", LLM_BENCH_CSV},
        {"json", LLM_BENCH_JSON},   {"jsonl", LLM_BENCH_JSONL},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (name && strcmp(name, t[i].n) == 0) { *out = t[i].f; return 0; }
    return -1;
}

static void copy_str(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src ? src : "");
}

void llm_bench_row_init(llm_bench_row *r, const char *bench, const char *op)
{
    memset(r, 0, sizeof *r);
    copy_str(r->bench, sizeof r->bench, bench);
    copy_str(r->op, sizeof r->op, op);
    copy_str(r->device, sizeof r->device, "cpu");
    copy_str(r->dtype, sizeof r->dtype, "f32");
    copy_str(r->commit, sizeof r->commit, llm_version());
    r->ranks = 1;
    r->peak_pct = -1;
    if (gethostname(r->host, sizeof r->host) != 0) copy_str(r->host, sizeof r->host, "unknown");
    r->host[sizeof r->host - 1] = 0;
    const char *core = openblas_get_corename();
    snprintf(r->cpu, sizeof r->cpu, "%s openblas=%s", llm_qk_isa_name(llm_qk_isa_best()),
             core && *core ? core : "?");
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm)) strftime(r->date, sizeof r->date, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

void llm_bench_row_kv(llm_bench_row *r, const char *key, double v)
{
    for (int i = 0; i < r->nkv; i++)
        if (strcmp(r->kv[i].key, key) == 0) { r->kv[i].v = v; return; }
    if (r->nkv >= LLM_BENCH_MAX_KV) return;
    copy_str(r->kv[r->nkv].key, sizeof r->kv[r->nkv].key, key);
    r->kv[r->nkv++].v = v;
}

double llm_bench_row_get(const llm_bench_row *r, const char *key, double def)
{
    for (int i = 0; i < r->nkv; i++)
        if (strcmp(r->kv[i].key, key) == 0) return r->kv[i].v;
    return def;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void llm_bench_row_times(llm_bench_row *r, double *t, int n, double work, double scale,
                         const char *unit)
{
    if (n <= 0) return;
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    r->reps = n;
    r->t_min = t[0];
    r->t_max = t[n - 1];
    r->t_med = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    r->work = work;
    /* A clock tick of zero would make the rate infinite; the JSON writer turns that
     * into null, the table into "inf". */
    r->rate = r->t_med > 0 ? work / r->t_med / scale : INFINITY;
    copy_str(r->unit, sizeof r->unit, unit);
}

int llm_bench_parse_size(const char *s, size_t *out)
{
    if (!s || *s < '0' || *s > '9') return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno) return -1;
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    default: break;
    }
    if (shift && *end == 'i') end++;
    if (*end == 'B' || *end == 'b') end++;
    if (*end) return -1;
    if (v > (1ull << 40) >> shift) return -1;
    *out = (size_t)(v << shift);
    return 0;
}

void llm_bench_time(void (*fn)(void *ctx), void *ctx, int warmup, int reps, double *t)
{
    for (int i = 0; i < warmup; i++) fn(ctx);
    for (int i = 0; i < reps; i++) {
        double t0 = llm_now_s();
        fn(ctx);
        t[i] = llm_now_s() - t0;
    }
}

int llm_bench_rows_push(llm_bench_rows *l, const llm_bench_row *r, llm_status *st)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        llm_bench_row *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v) return llm_err(st, LLM_ENOMEM, "out of memory for benchmark rows");
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = *r;
    return 0;
}

void llm_bench_rows_free(llm_bench_rows *l)
{
    free(l->v);
    memset(l, 0, sizeof *l);
}

/* ---- writers ---- */

static void json_row(llm_json *j, const llm_bench_row *r)
{
    llm_json_obj_begin(j);
    llm_json_kstr(j, "benchmark", r->bench);
    llm_json_kstr(j, "op", r->op);
    llm_json_kstr(j, "device", r->device);
    llm_json_kstr(j, "dtype", r->dtype);
    if (r->precision[0]) llm_json_kstr(j, "precision", r->precision);
    llm_json_kstr(j, "shape", r->shape);
    llm_json_kint(j, "threads", r->threads);
    llm_json_kint(j, "ranks", r->ranks);
    llm_json_kint(j, "warmup", r->warmup);
    llm_json_kint(j, "reps", r->reps);
    llm_json_knum(j, "time_min_s", r->t_min);
    llm_json_knum(j, "time_median_s", r->t_med);
    llm_json_knum(j, "time_max_s", r->t_max);
    llm_json_knum(j, "work", r->work);
    llm_json_knum(j, "rate", r->rate);
    llm_json_kstr(j, "unit", r->unit);
    if (r->peak_pct >= 0) llm_json_knum(j, "peak_pct", r->peak_pct);
    else { llm_json_key(j, "peak_pct"); llm_json_null(j); }
    for (int i = 0; i < r->nkv; i++) llm_json_knum(j, r->kv[i].key, r->kv[i].v);
    llm_json_kstr(j, "note", r->note);
    llm_json_kstr(j, "commit", r->commit);
    llm_json_kstr(j, "host", r->host);
    llm_json_kstr(j, "cpu", r->cpu);
    llm_json_kstr(j, "date", r->date);
    llm_json_obj_end(j);
}

/* The union of extra keys over all rows, in order of first appearance. */
static int kv_keys(const llm_bench_row *rows, int n, const char **keys, int cap)
{
    int nk = 0;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < rows[i].nkv; k++) {
            int seen = 0;
            for (int m = 0; m < nk && !seen; m++) seen = strcmp(keys[m], rows[i].kv[k].key) == 0;
            if (!seen && nk < cap) keys[nk++] = rows[i].kv[k].key;
        }
    return nk;
}

static void csv_field(FILE *f, const char *s)
{
    if (strpbrk(s, ",\"\n\r") == NULL) { fputs(s, f); return; }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

/* the shortest of %.{6..17}g that reads back to the same double, as the json writer's
 * numbers: %.6g alone wrote a work of 6291456 bytes as 6.29146e+06 */
static void csv_num(FILE *f, double v)
{
    if (!isfinite(v)) return;
    char buf[40];
    for (int p = 6; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, v);
        if (strtod(buf, NULL) == v) break;
    }
    fputs(buf, f);
}

static void write_csv(FILE *f, const llm_bench_row *rows, int n)
{
    const char *keys[64];
    int nk = kv_keys(rows, n, keys, 64);
    int prec = 0;
    for (int i = 0; i < n && !prec; i++) prec = rows[i].precision[0] != 0;
    fputs(prec ? "benchmark,op,device,dtype,precision,shape," : "benchmark,op,device,dtype,shape,", f);
    fputs("threads,ranks,warmup,reps,time_min_s,"
          "time_median_s,time_max_s,work,rate,unit,peak_pct", f);
    for (int k = 0; k < nk; k++) fprintf(f, ",%s", keys[k]);
    fputs(",note,commit,host,cpu,date\n", f);
    for (int i = 0; i < n; i++) {
        const llm_bench_row *r = &rows[i];
        csv_field(f, r->bench); fputc(',', f);
        csv_field(f, r->op); fputc(',', f);
        csv_field(f, r->device); fputc(',', f);
        csv_field(f, r->dtype); fputc(',', f);
        if (prec) { csv_field(f, r->precision); fputc(',', f); }
        csv_field(f, r->shape);
        fprintf(f, ",%d,%d,%d,%d,", r->threads, r->ranks, r->warmup, r->reps);
        csv_num(f, r->t_min); fputc(',', f);
        csv_num(f, r->t_med); fputc(',', f);
        csv_num(f, r->t_max); fputc(',', f);
        csv_num(f, r->work); fputc(',', f);
        csv_num(f, r->rate); fputc(',', f);
        csv_field(f, r->unit); fputc(',', f);
        if (r->peak_pct >= 0) csv_num(f, r->peak_pct);
        for (int k = 0; k < nk; k++) {
            fputc(',', f);
            double v = llm_bench_row_get(r, keys[k], NAN);
            csv_num(f, v);
        }
        fputc(',', f); csv_field(f, r->note);
        fputc(',', f); csv_field(f, r->commit);
        fputc(',', f); csv_field(f, r->host);
        fputc(',', f); csv_field(f, r->cpu);
        fputc(',', f); csv_field(f, r->date);
        fputc('\n', f);
    }
}

static void write_table(FILE *f, const llm_bench_row *rows, int n)
{
    if (n == 0) return;
    fprintf(f, "# commit %s  host %s  cpu %s  date %s\n", rows[0].commit, rows[0].host, rows[0].cpu,
            rows[0].date);
    fprintf(f, "%-13s %-12s %-5s %-5s %-22s %4s %5s %10s %10s %10s %12s %-9s %6s\n", "benchmark",
            "op", "dev", "dtype", "shape", "thr", "reps", "min_ms", "median_ms", "max_ms",
            "rate", "unit", "%peak");
    for (int i = 0; i < n; i++) {
        const llm_bench_row *r = &rows[i];
        char pk[16] = "-";
        if (r->peak_pct >= 0) snprintf(pk, sizeof pk, "%.1f", r->peak_pct);
        fprintf(f, "%-13s %-12s %-5s %-5s %-22s %4d %5d %10.4f %10.4f %10.4f %12.4g %-9s %6s",
                r->bench, r->op, r->device, r->dtype, r->shape, r->threads, r->reps,
                1e3 * r->t_min, 1e3 * r->t_med, 1e3 * r->t_max, r->rate, r->unit, pk);
        for (int k = 0; k < r->nkv; k++) fprintf(f, " %s=%.4g", r->kv[k].key, r->kv[k].v);
        if (r->precision[0]) fprintf(f, " precision=%s", r->precision);
        if (r->note[0]) fprintf(f, "  # %s", r->note);
        fputc('\n', f);
    }
}

int llm_bench_write(FILE *f, llm_bench_format fmt, const llm_bench_row *rows, int n)
{
    llm_json j;
    switch (fmt) {
    case LLM_BENCH_TABLE: write_table(f, rows, n); break;
    case LLM_BENCH_CSV: write_csv(f, rows, n); break;
    case LLM_BENCH_JSON:
        llm_json_init(&j, f, 1);
        llm_json_obj_begin(&j);
        llm_json_key(&j, "results");
        llm_json_arr_begin(&j);
        for (int i = 0; i < n; i++) json_row(&j, &rows[i]);
        llm_json_arr_end(&j);
        llm_json_obj_end(&j);
        fputc('\n', f);
        break;
    case LLM_BENCH_JSONL:
        for (int i = 0; i < n; i++) {
            llm_json_init(&j, f, 0);
            json_row(&j, &rows[i]);
            fputc('\n', f);
        }
        break;
    }
    if (fflush(f) != 0 || ferror(f)) {
        if (errno == 0) errno = EIO;
        return -1;
    }
    return 0;
}

int llm_bench_write_file(const char *path, llm_bench_format fmt, const llm_bench_row *rows,
                         int n, llm_status *st)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    int rc = m ? llm_bench_write(m, fmt, rows, n) : -1;
    if (m && fclose(m) != 0)
        rc = -1;
    rc = rc ? llm_err(st, LLM_ENOMEM, "out of memory for '%s'", path)
            : llm_afile_write(path, 0, buf, len, st);
    free(buf);
    return rc;
}
