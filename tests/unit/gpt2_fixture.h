/* gpt2_fixture.h — a synthetic GPT-2 .llmk for the shard/interop unit tests: every
 * parameter of common/model.h with random data (f32, or q8_0 matmul weights with valid
 * f16 scales), optionally the AdamW moments, the byte tokenizer and a train: section. */
#ifndef LLM_GPT2_FIXTURE_H
#define LLM_GPT2_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ckpt.h"
#include "common/model.h"
#include "common/tokenizer.h"
#include "tests/unit/testutil.h"

typedef struct {
    int n_layer, n_head, n_embd, vocab, maxT;
    int q8;          /* matmul weights and wte as q8_0 */
    int opt;         /* add opt.m./opt.v. moments */
    int pad_zero;    /* padded wte rows are 0 (as training leaves them) */
    const char *gpt2_dir;   /* GPT-2 tokenizer from this dir (encoder.json, vocab.bpe); NULL: byte */
} fx_spec;

typedef struct {
    void *bufs[1024];
    int n;
} fx_mem;

__attribute__((unused)) static void fx_free(fx_mem *m)
{
    for (int i = 0; i < m->n; i++)
        free(m->bufs[i]);
    m->n = 0;
}

__attribute__((unused)) static void fx_add(llm_ckpt_writer *w, fx_mem *mem, tu_rng *r, const char *name, int ndim, int64_t d0,
                   int64_t d1, llm_dtype dt, int64_t zero_rows_from)
{
    int64_t shape[2] = {d0, d1};
    uint64_t nel = (uint64_t)d0 * (uint64_t)(ndim == 2 ? d1 : 1), nb;
    assert_int_equal(llm_dtype_nbytes(dt, nel, &nb), 0);
    unsigned char *b = malloc(nb + 1);
    if (dt == LLM_DT_Q8_0) {
        for (uint64_t k = 0; k < nb; k += 34) {
            uint16_t sc = (uint16_t)(0x2000 + (tu_next(r) & 0x0fff));   /* a normal f16 */
            memcpy(b + k, &sc, 2);
            for (int j = 0; j < 32; j++)
                b[k + 2 + j] = (unsigned char)tu_next(r);
        }
        if (zero_rows_from >= 0)
            memset(b + (uint64_t)zero_rows_from * (uint64_t)d1 / 32 * 34, 0,
                   nb - (uint64_t)zero_rows_from * (uint64_t)d1 / 32 * 34);
    } else {
        float *f = (float *)b;
        for (uint64_t k = 0; k < nel; k++)
            f[k] = tu_uniform(r, -0.1f, 0.1f);
        if (zero_rows_from >= 0)
            memset(f + zero_rows_from * d1, 0, (size_t)(nel - (uint64_t)(zero_rows_from * d1)) * 4);
    }
    mem->bufs[mem->n++] = b;
    llm_status st = {0};
    assert_int_equal(llm_ckpt_add(w, name, dt, ndim, shape, b, 0, &st), 0);
}

/* Write the fixture to path; returns the config. */
__attribute__((unused)) static llm_model_config fx_write(const char *path, const fx_spec *s, uint64_t seed)
{
    llm_model_config cfg = {"gpt2", s->n_layer, s->n_head, s->n_embd, s->vocab, 0, s->maxT};
    cfg.padded_vocab = (s->vocab + 127) / 128 * 128;
    llm_ckpt_writer *w;
    llm_status st = {0};
    fx_mem mem = {{0}, 0};
    tu_rng r = {seed};
    assert_int_equal(llm_ckpt_writer_new(&w, &st), 0);
    assert_int_equal(llm_ckpt_set_section(w, "model", llm_model_config_node(&cfg), &st), 0);
    llm_tokenizer *tok;
    if (s->gpt2_dir)
        assert_int_equal(llm_tokenizer_gpt2(&tok, s->gpt2_dir, &st), 0);
    else
        assert_int_equal(llm_tokenizer_byte(&tok, &st), 0);
    assert_int_equal(llm_tokenizer_save(tok, w, &st), 0);
    llm_node *tr = llm_node_new_map();
    llm_node_set_int(tr, "step", 42);
    assert_int_equal(llm_ckpt_set_section(w, "train", tr, &st), 0);
    int C = s->n_embd;
    char nm[3][96];
    for (int pass = 0; pass < (s->opt ? 3 : 1); pass++) {
        const char *pre = pass == 0 ? "" : pass == 1 ? "opt.m." : "opt.v.";
        struct { const char *n; int nd; int64_t a, b; } L[] = {
            {"ln_1.weight", 1, C, 0}, {"ln_1.bias", 1, C, 0},
            {"attn.c_attn.weight", 2, 3 * C, C}, {"attn.c_attn.bias", 1, 3 * C, 0},
            {"attn.c_proj.weight", 2, C, C}, {"attn.c_proj.bias", 1, C, 0},
            {"ln_2.weight", 1, C, 0}, {"ln_2.bias", 1, C, 0},
            {"mlp.c_fc.weight", 2, 4 * C, C}, {"mlp.c_fc.bias", 1, 4 * C, 0},
            {"mlp.c_proj.weight", 2, C, 4 * C}, {"mlp.c_proj.bias", 1, C, 0}};
        llm_dtype mdt = s->q8 && pass == 0 ? LLM_DT_Q8_0 : LLM_DT_F32;
        snprintf(nm[0], sizeof nm[0], "%swte", pre);
        fx_add(w, &mem, &r, nm[0], 2, cfg.padded_vocab, C, mdt, s->pad_zero ? s->vocab : -1);
        snprintf(nm[0], sizeof nm[0], "%swpe", pre);
        fx_add(w, &mem, &r, nm[0], 2, s->maxT, C, LLM_DT_F32, -1);
        for (int l = 0; l < s->n_layer; l++)
            for (int k = 0; k < 12; k++) {
                snprintf(nm[1], sizeof nm[1], "%sh.%d.%s", pre, l, L[k].n);
                fx_add(w, &mem, &r, nm[1], L[k].nd, L[k].a, L[k].b,
                       L[k].nd == 2 ? mdt : LLM_DT_F32, -1);
            }
        snprintf(nm[2], sizeof nm[2], "%sln_f.weight", pre);
        fx_add(w, &mem, &r, nm[2], 1, C, 0, LLM_DT_F32, -1);
        snprintf(nm[2], sizeof nm[2], "%sln_f.bias", pre);
        fx_add(w, &mem, &r, nm[2], 1, C, 0, LLM_DT_F32, -1);
    }
    assert_int_equal(llm_ckpt_write(w, path, &st), 0);
    llm_ckpt_writer_free(w);
    llm_tokenizer_free(tok);
    fx_free(&mem);
    return cfg;
}

/* Every tensor of a equals b's (name, dtype, shape, bytes), in the same order when
 * ordered; the model: and tokenizer: sections are present in b. */
__attribute__((unused)) static void fx_assert_same2(const char *pa, const char *pb, int ordered)
{
    llm_ckpt *a, *b;
    llm_status st = {0};
    assert_int_equal(llm_ckpt_open(&a, pa, 0, &st), 0);
    assert_int_equal(llm_ckpt_open(&b, pb, 0, &st), 0);
    assert_int_equal(llm_ckpt_count(a), llm_ckpt_count(b));
    for (int i = 0; i < llm_ckpt_count(a); i++) {
        const llm_tensor *x = llm_ckpt_tensor(a, i);
        const llm_tensor *y = ordered ? llm_ckpt_tensor(b, i) : llm_ckpt_find(b, x->name);
        if (!y)
            fail_msg("tensor '%s' missing", x->name);
        assert_string_equal(x->name, y->name);
        assert_int_equal(x->dtype, y->dtype);
        assert_int_equal(x->ndim, y->ndim);
        for (int d = 0; d < x->ndim; d++)
            assert_int_equal(x->shape[d], y->shape[d]);
        assert_int_equal(x->nbytes, y->nbytes);
        assert_true(x->nbytes == 0 || memcmp(x->data, y->data, x->nbytes) == 0);
    }
    assert_non_null(llm_ckpt_section(b, "model"));
    assert_non_null(llm_ckpt_section(b, "tokenizer"));
    llm_ckpt_close(a);
    llm_ckpt_close(b);
}

__attribute__((unused)) static void fx_assert_same(const char *pa, const char *pb) { fx_assert_same2(pa, pb, 1); }

/* Shape refusals of the exporters: copy the checkpoint at in to out with tensor victim's
 * shape wrong (mode 0: the first dimension one larger, wte one column wider since it may
 * have extra rows; mode 1: one dimension fewer or more; mode 2: the first dimension
 * halved, for wte fewer rows than the vocabulary), its data zeros. */
static const char *const fx_shape_victims[] = {"wpe", "h.0.ln_1.weight", "h.1.attn.c_attn.weight",
                                               "h.0.attn.c_attn.bias", "h.1.mlp.c_fc.weight",
                                               "h.0.mlp.c_proj.weight", "ln_f.bias", "wte"};
enum { FX_SHAPE_VICTIMS = 8 };

__attribute__((unused)) static void fx_rewrite_shape(const char *in, const char *out, const char *victim, int mode)
{
    llm_status st = {0};
    llm_ckpt *c;
    llm_ckpt_writer *w;
    assert_int_equal(llm_ckpt_open(&c, in, 0, &st), 0);
    assert_int_equal(llm_ckpt_writer_new(&w, &st), 0);
    assert_int_equal(llm_ckpt_set_section(w, "model", llm_node_copy(llm_ckpt_section(c, "model")), &st), 0);
    void *zeros = NULL;
    for (int i = 0; i < llm_ckpt_count(c); i++) {
        const llm_tensor *t = llm_ckpt_tensor(c, i);
        int64_t sh[2] = {t->shape[0], t->ndim == 2 ? t->shape[1] : 0};
        int nd = t->ndim;
        const void *data = t->data;
        if (!strcmp(t->name, victim)) {
            if (mode == 0 && !strcmp(t->name, "wte"))
                sh[1]++;
            else if (mode == 0)
                sh[0]++;
            else if (mode == 2)
                sh[0] /= 2;
            else if (nd == 2)
                nd = 1, sh[0] *= sh[1];
            else
                nd = 2, sh[1] = 1;
            uint64_t nb;
            assert_int_equal(llm_dtype_nbytes(t->dtype, (uint64_t)(sh[0] * (nd == 2 ? sh[1] : 1)), &nb), 0);
            data = zeros = calloc(1, nb + 1);
        }
        assert_int_equal(llm_ckpt_add(w, t->name, t->dtype, nd, sh, data, 0, &st), 0);
    }
    assert_int_equal(llm_ckpt_write(w, out, &st), 0);
    llm_ckpt_writer_free(w);
    llm_ckpt_close(c);
    free(zeros);
}

#endif
