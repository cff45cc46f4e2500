/* infer_eval.c — perplexity over a token file with the inference forward. */
#include "common/infer_eval.h"
#include "common/clock.h"

#include <math.h>
#include <stdlib.h>
#include <time.h>

#include "common/sampler.h"

/* Rows of logits held at once. */
#define EVAL_CHUNK 64

/* -log softmax(logits[0..V))[target] */
static double row_nll(const float *lg, int V, uint32_t target)
{
    return llm_logsumexp(lg, V) - lg[target];
}

int llm_infer_eval(llm_infer_ctx *c, const llm_infer_model *m, const llm_tokfile *tf, int ctx,
                   int stride, llm_infer_eval_result *res, llm_status *st)
{
    const llm_model_config *cfg = &m->cfg;
    if (ctx < 1 || ctx > cfg->max_seq_len)
        return llm_err(st, LLM_EUSAGE, "--ctx must be in 1..%d (got %d)", cfg->max_seq_len, ctx);
    if (stride < 1 || stride > ctx)
        return llm_err(st, LLM_EUSAGE, "--stride must be in 1..%d (got %d)", ctx, stride);
    if (tf->ntok < 2)
        return llm_err(st, LLM_EDATA, "token file has %llu token(s); need at least 2",
                       (unsigned long long)tf->ntok);
    int R = llm_infer_ctx_max_rows(c), V = cfg->vocab_size, Vp = cfg->padded_vocab;
    llm_infer_row *rows = malloc((size_t)R * sizeof *rows);
    int *which = malloc((size_t)R * sizeof *which);
    float *logits = llm_backend_host_alloc(m->be, (size_t)EVAL_CHUNK * Vp * sizeof(float));
    double nll[EVAL_CHUNK];
    int nt = m->be->threads > 0 ? m->be->threads : 1;
    int32_t *win = malloc(((size_t)ctx + 1) * sizeof *win);
    int rc = LLM_OK;
    if (!rows || !which || !logits || !win) {
        rc = llm_err(st, LLM_ENOMEM, "out of memory");
        goto out;
    }
    double t0 = llm_now_s(), sum = 0.0;
    uint64_t scored_to = 0;   /* targets with index <= scored_to are done (0 is never one) */
    uint64_t count = 0, last = tf->ntok - 1;
    for (uint64_t b = 0; scored_to < last; b += (uint64_t)stride) {
        int len = last - b < (uint64_t)ctx ? (int)(last - b) : ctx;
        llm_tokfile_read(tf, b, (size_t)len + 1, win);
        for (int i = 0; i <= len; i++)
            if (win[i] < 0 || win[i] >= V) {
                rc = llm_err(st, LLM_EDATA, "token %llu: id %d >= vocabulary %d",
                             (unsigned long long)(b + i), win[i], V);
                goto out;
            }
        for (int p0 = 0; p0 < len; p0 += R) {
            int k = len - p0 < R ? len - p0 : R, nw = 0;
            for (int i = 0; i < k; i++) {
                rows[i] = (llm_infer_row){win[p0 + i], 0, p0 + i};
                /* row p0+i predicts target b+p0+i+1 */
                if (b + (uint64_t)p0 + i + 1 > scored_to)
                    which[nw++] = i;
            }
            if ((rc = llm_infer_forward(c, rows, k, st)))
                goto out;
            if (nw == 0)
                continue;
            for (int j0 = 0; j0 < nw; j0 += EVAL_CHUNK) {
                int q = nw - j0 < EVAL_CHUNK ? nw - j0 : EVAL_CHUNK;
                if ((rc = llm_infer_logits(c, which + j0, q, logits, st)))
                    goto out;
                /* rows in parallel, summed in order (the same total on any thread count) */
#pragma omp parallel for num_threads(nt) schedule(static) if (q > 1 && nt > 1)
                for (int j = 0; j < q; j++)
                    nll[j] = row_nll(logits + (size_t)j * Vp, V,
                                     (uint32_t)win[p0 + which[j0 + j] + 1]);
                for (int j = 0; j < q; j++)
                    sum += nll[j];
                count += (uint64_t)q;
            }
        }
        scored_to = b + (uint64_t)len;
    }
    res->tokens = count;
    res->nll = sum / (double)count;
    res->ppl = exp(res->nll);
    res->seconds = llm_now_s() - t0;
out:
    free(rows);
    free(which);
    llm_backend_host_free(m->be, logits);
    free(win);
    return rc;
}
