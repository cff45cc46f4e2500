/* test_infer_util.h — helpers shared by the llm-infer unit tests: a random GPT-2 saved
 * as a .llmk file, and an in-memory request source / result sink. */
#ifndef TEST_INFER_UTIL_H
#define TEST_INFER_UTIL_H

#include <stdlib.h>
#include <string.h>

#include "common/ckpt.h"
#include "common/infer_sched.h"
#include "common/model.h"
#include "common/tokenizer.h"

/* Write a random model (weights scaled by `scale` so logits are well separated) to
 * path; the training model is returned in *out on backend be (caller frees). */
static inline void tiu_make_model(const char *path, const llm_model_config *cfg, llm_backend *be,
                                  uint64_t seed, float scale, int with_tok, llm_model **out)
{
    llm_status st = {0};
    llm_model *m = NULL;
    assert_int_equal(llm_model_new(&m, cfg, be, &st), 0);
    llm_model_init_gpt2(m, seed);
    float *p = llm_model_params(m);
    size_t n = llm_model_num_params(cfg);
    for (size_t i = 0; i < n; i++)
        p[i] *= scale;
    llm_ckpt_writer *w = NULL;
    assert_int_equal(llm_ckpt_writer_new(&w, &st), 0);
    assert_int_equal(llm_ckpt_set_section(w, "model", llm_model_config_node(cfg), &st), 0);
    llm_tokenizer *tok = NULL;
    if (with_tok) {
        assert_int_equal(llm_tokenizer_byte(&tok, &st), 0);
        assert_int_equal(llm_tokenizer_save(tok, w, &st), 0);
    }
    assert_int_equal(llm_model_save(m, w, 0, &st), 0);
    int rc = llm_ckpt_write(w, path, &st);
    if (rc)
        fprintf(stderr, "write: %s\n", st.msg);
    assert_int_equal(rc, 0);
    llm_ckpt_writer_free(w);
    if (tok)
        llm_tokenizer_free(tok);
    *out = m;
}

/* In-memory requests and results. */
typedef struct {
    llm_infer_request *reqs;   /* templates: copied out on next */
    int n, at;
    /* results by request index */
    uint32_t **toks;
    int *ntok;
    char **reason;
    int ndone;
} tiu_io;

static inline int tiu_next(void *u, llm_infer_request *req, llm_status *st)
{
    (void)st;
    tiu_io *io = u;
    if (io->at >= io->n)
        return 0;
    const llm_infer_request *t = &io->reqs[io->at++];
    *req = *t;
    req->prompt = malloc((size_t)(t->n_prompt ? t->n_prompt : 1) * sizeof(uint32_t));
    if (t->n_prompt)
        memcpy(req->prompt, t->prompt, (size_t)t->n_prompt * sizeof(uint32_t));
    req->stops = NULL;
    req->n_stops = 0;
    req->id_str = NULL;
    req->error = NULL;
    return 1;
}

static inline int tiu_done(void *u, const llm_infer_result *r, llm_status *st)
{
    (void)st;
    tiu_io *io = u;
    long i = r->req->index;
    io->toks[i] = malloc((size_t)(r->n_tokens + 1) * sizeof(uint32_t));
    if (r->n_tokens)
        memcpy(io->toks[i], r->tokens, (size_t)r->n_tokens * sizeof(uint32_t));
    io->ntok[i] = r->n_tokens;
    io->reason[i] = strdup(r->finish_reason);
    io->ndone++;
    return 0;
}

static inline void tiu_io_init(tiu_io *io, llm_infer_request *reqs, int n)
{
    memset(io, 0, sizeof *io);
    io->reqs = reqs;
    io->n = n;
    io->toks = calloc((size_t)n, sizeof *io->toks);
    io->ntok = calloc((size_t)n, sizeof *io->ntok);
    io->reason = calloc((size_t)n, sizeof *io->reason);
}

static inline void tiu_io_free(tiu_io *io)
{
    for (int i = 0; i < io->n; i++) {
        free(io->toks[i]);
        free(io->reason[i]);
    }
    free(io->toks);
    free(io->ntok);
    free(io->reason);
}

#endif
