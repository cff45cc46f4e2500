/* profile_report.c — the profiler's table, JSON rows and Chrome trace. */
#include "common/profile_impl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int cmp_entry(const void *a, const void *b)
{
    const llm_profile_entry *x = a, *y = b;
    if (x->seconds != y->seconds) return x->seconds < y->seconds ? 1 : -1;
    if (x->op != y->op) return (int)x->op - (int)y->op;
    if (x->layer != y->layer) return x->layer - y->layer;
    return strcmp(x->site, y->site);
}

int llm_profile_entries(const llm_profile *p, int fold, llm_profile_entry **out, int *n,
                        llm_status *st)
{
    *out = NULL;
    *n = 0;
    llm_profile_entry *v = calloc(p->nagg ? p->nagg : 1, sizeof *v);
    if (!v) return llm_err(st, LLM_ENOMEM, "out of memory for profile rows");
    int k = 0;
    for (size_t i = 0; i < p->cagg; i++) {
        const agg_entry *e = &p->agg[i];
        if (!e->used || e->calls == 0) continue;
        int layer = fold ? -1 : e->layer;
        int j = 0;
        if (fold)   /* few rows after folding: a linear merge is fine */
            for (; j < k; j++)
                if (v[j].op == (llm_op)e->op && strcmp(v[j].site, p->sites[e->site]) == 0) break;
        if (!fold || j == k) {
            j = k++;
            v[j].op = (llm_op)e->op;
            snprintf(v[j].site, sizeof v[j].site, "%s", p->sites[e->site]);
            v[j].layer = layer;
        }
        v[j].calls += e->calls;
        v[j].seconds += e->seconds;
        v[j].flop += e->flop;
        v[j].bytes += e->bytes;
    }
    qsort(v, (size_t)k, sizeof *v, cmp_entry);
    *out = v;
    *n = k;
    return 0;
}

const char *llm_profile_bound(double flop, double bytes, const llm_profile_peaks *pk)
{
    if (!pk || pk->gflops <= 0 || pk->gbs <= 0 || bytes <= 0) return "-";
    return flop / bytes > pk->gflops / pk->gbs ? "compute" : "memory";
}

static double ratio(double a, double b)
{
    return b > 0 ? a / b : 0;
}

double llm_profile_roof_pct(double flop, double bytes, double seconds, const llm_profile_peaks *pk)
{
    if (!pk || pk->gflops <= 0 || pk->gbs <= 0 || !(seconds > 0)) return -1;
    double tf = flop / (pk->gflops * 1e9), tb = bytes / (pk->gbs * 1e9);
    return 100 * (tf > tb ? tf : tb) / seconds;
}

/* roof% as the table prints it: "-" when unknown */
static void roof_str(char *b, size_t n, double pct)
{
    if (pct < 0) snprintf(b, n, "-");
    else snprintf(b, n, "%.1f", pct);
}

int llm_profile_write_table(const llm_profile *p, FILE *f, int fold, const llm_profile_peaks *pk,
                            llm_status *st)
{
    llm_profile_entry *v;
    int n;
    if (llm_profile_entries(p, fold, &v, &n, st)) return st->code;
    double total = p->total_s;
    fprintf(f, "%-26s %-13s %5s %7s %10s %6s %9s %9s %9s %8s %-7s %6s\n", "op", "site", "layer",
            "calls", "total_ms", "%", "GFLOP", "GFLOP/s", "GB", "GB/s", "bound", "roof%");
    double tf = 0, tb = 0, troof = 0;
    char roof[16];
    for (int i = 0; i < n; i++) {
        const llm_profile_entry *e = &v[i];
        char layer[16] = "all";
        if (!fold) {
            if (e->layer >= 0) snprintf(layer, sizeof layer, "%d", e->layer);
            else snprintf(layer, sizeof layer, "-");
        }
        double rp = llm_profile_roof_pct(e->flop, e->bytes, e->seconds, pk);
        roof_str(roof, sizeof roof, rp);
        fprintf(f, "%-26s %-13s %5s %7ld %10.3f %6.2f %9.4f %9.2f %9.4f %8.2f %-7s %6s\n",
                llm_op_name(e->op), e->site[0] ? e->site : "-", layer, e->calls,
                1e3 * e->seconds, 100 * ratio(e->seconds, total), 1e-9 * e->flop,
                1e-9 * ratio(e->flop, e->seconds), 1e-9 * e->bytes,
                1e-9 * ratio(e->bytes, e->seconds), llm_profile_bound(e->flop, e->bytes, pk), roof);
        tf += e->flop;
        tb += e->bytes;
        if (rp >= 0) troof += rp / 100 * e->seconds;   /* the op's time at the peaks */
    }
    /* the whole: the ops' times at the peaks, summed, over the profiled time */
    roof_str(roof, sizeof roof, pk && pk->gflops > 0 && pk->gbs > 0 && total > 0 ? 100 * troof / total : -1);
    fprintf(f, "%-26s %-13s %5s %7s %10.3f %6.2f %9.4f %9.2f %9.4f %8.2f %-7s %6s\n", "total", "", "", "",
            1e3 * total, total > 0 ? 100.0 : 0.0, 1e-9 * tf, 1e-9 * ratio(tf, total), 1e-9 * tb,
            1e-9 * ratio(tb, total), "", roof);
    free(v);
    if (ferror(f)) return llm_err(st, LLM_EIO, "write failed: %s", strerror(errno));
    return 0;
}

int llm_profile_write_json_ops(const llm_profile *p, llm_json *j, int fold,
                               const llm_profile_peaks *pk, llm_status *st)
{
    llm_profile_entry *v;
    int n;
    if (llm_profile_entries(p, fold, &v, &n, st)) return st->code;
    llm_json_knum(j, "total_ms", 1e3 * p->total_s);
    llm_json_key(j, "ops");
    llm_json_arr_begin(j);
    for (int i = 0; i < n; i++) {
        const llm_profile_entry *e = &v[i];
        llm_json_obj_begin(j);
        llm_json_kstr(j, "op", llm_op_name(e->op));
        llm_json_kstr(j, "site", e->site);
        if (fold) llm_json_kstr(j, "layer", "all");
        else llm_json_kint(j, "layer", e->layer);
        llm_json_kint(j, "calls", e->calls);
        llm_json_knum(j, "total_ms", 1e3 * e->seconds);
        llm_json_knum(j, "pct", 100 * ratio(e->seconds, p->total_s));
        llm_json_knum(j, "gflop", 1e-9 * e->flop);
        llm_json_knum(j, "gflops", 1e-9 * ratio(e->flop, e->seconds));
        llm_json_knum(j, "gb", 1e-9 * e->bytes);
        llm_json_knum(j, "gbs", 1e-9 * ratio(e->bytes, e->seconds));
        llm_json_knum(j, "intensity", ratio(e->flop, e->bytes));
        llm_json_kstr(j, "bound", llm_profile_bound(e->flop, e->bytes, pk));
        double rp = llm_profile_roof_pct(e->flop, e->bytes, e->seconds, pk);
        if (rp >= 0) llm_json_knum(j, "roof_pct", rp);
        llm_json_obj_end(j);
    }
    llm_json_arr_end(j);
    free(v);
    return 0;
}

int llm_profile_write_trace(const llm_profile *p, FILE *f, llm_status *st)
{
    llm_json j;
    llm_json_init(&j, f, 0);
    llm_json_obj_begin(&j);
    llm_json_kstr(&j, "displayTimeUnit", "ms");
    llm_json_key(&j, "traceEvents");
    llm_json_arr_begin(&j);
    /* Metadata: name the process and the two tracks (spans above, ops below). */
    const char *meta[][2] = {{"process_name", "llmkit"}, {"thread_name", "steps"},
                             {"thread_name", "ops"}};
    for (int i = 0; i < 3; i++) {
        llm_json_obj_begin(&j);
        llm_json_kstr(&j, "name", meta[i][0]);
        llm_json_kstr(&j, "ph", "M");
        llm_json_kint(&j, "pid", 1);
        llm_json_kint(&j, "tid", i == 2 ? 2 : 1);
        llm_json_key(&j, "args");
        llm_json_obj_begin(&j);
        llm_json_kstr(&j, "name", meta[i][1]);
        llm_json_obj_end(&j);
        llm_json_obj_end(&j);
    }
    for (size_t i = 0; i < p->nspans; i++) {
        const span *s = &p->spans[i];
        if (s->dur < 0) continue;
        llm_json_obj_begin(&j);
        llm_json_kstr(&j, "name", s->name);
        llm_json_kstr(&j, "cat", "span");
        llm_json_kstr(&j, "ph", "X");
        llm_json_knum(&j, "ts", 1e6 * s->t0);
        llm_json_knum(&j, "dur", 1e6 * s->dur);
        llm_json_kint(&j, "pid", 1);
        llm_json_kint(&j, "tid", 1);
        llm_json_obj_end(&j);
    }
    for (size_t i = 0; i < p->ntrace; i++) {
        const trace_event *e = &p->trace[i];
        llm_json_obj_begin(&j);
        llm_json_kstr(&j, "name", llm_op_name((llm_op)e->op));
        llm_json_kstr(&j, "cat", e->op >= LLM_OP_COPY ? "memory" : "op");
        llm_json_kstr(&j, "ph", "X");
        llm_json_knum(&j, "ts", 1e6 * e->t0);
        llm_json_knum(&j, "dur", 1e6 * e->dur);
        llm_json_kint(&j, "pid", 1);
        llm_json_kint(&j, "tid", 2);
        llm_json_key(&j, "args");
        llm_json_obj_begin(&j);
        llm_json_kint(&j, "layer", e->layer);
        llm_json_kstr(&j, "site", p->sites[e->site]);
        llm_json_knum(&j, "gflop", 1e-9 * e->flop);
        llm_json_knum(&j, "bytes", e->bytes);
        llm_json_obj_end(&j);
        llm_json_obj_end(&j);
    }
    llm_json_arr_end(&j);
    if (p->nevents > p->ntrace) llm_json_kint(&j, "droppedEvents", (int64_t)(p->nevents - p->ntrace));
    llm_json_obj_end(&j);
    fputc('\n', f);
    if (fflush(f) != 0 || ferror(f)) return llm_err(st, LLM_EIO, "trace write failed: %s", strerror(errno));
    return 0;
}
