/* infer_eval.h — perplexity of a model over a token file (llm-infer --eval). */
#ifndef LLM_INFER_EVAL_H
#define LLM_INFER_EVAL_H

#include <stdint.h>

#include "common/infer.h"
#include "common/tokfile.h"

typedef struct {
    uint64_t tokens;   /* predictions scored */
    double nll;        /* mean negative log-likelihood, nats per token */
    double ppl;        /* exp(nll) */
    double seconds;
} llm_infer_eval_result;

/* Sliding-window perplexity: windows of ctx tokens (ctx <= max_seq_len) starting every
 * stride tokens (1 <= stride <= ctx); each token is scored once, by the first window
 * that predicts it (so later windows score only their last stride positions and every
 * scored token has at least ctx - stride tokens of context, except in the first window).
 * Uses cache slot 0 of c; logits are computed only for the scored positions.
 * Errors: LLM_EUSAGE for bad ctx/stride, LLM_EDATA for a file with fewer than 2 tokens
 * or an id >= vocab. */
int llm_infer_eval(llm_infer_ctx *c, const llm_infer_model *m, const llm_tokfile *tf, int ctx,
                   int stride, llm_infer_eval_result *res, llm_status *st);

#endif
