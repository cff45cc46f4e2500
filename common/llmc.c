/* llmc.c — llm.c GPT-2 checkpoints <-> .llmk (format notes in llmc.h). */
#include "common/llmc.h"
#include "common/afile.h"

#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/ckpt.h"
#include "common/model_impl.h"
#include "common/quant.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "llm.c files are little-endian; this code assumes a little-endian host"
#endif

static int32_t rd_i32(const unsigned char *p)
{
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

int llm_llmc_parse_header(const void *buf, size_t len, uint64_t file_size, llm_llmc_info *info,
                          llm_status *st)
{
    const unsigned char *p = buf;
    memset(info, 0, sizeof *info);
    if (len < LLM_LLMC_HEADER_BYTES || file_size < LLM_LLMC_HEADER_BYTES)
        return llm_err(st, LLM_EDATA, "llm.c header truncated (%llu bytes, need %d)",
                       (unsigned long long)file_size, LLM_LLMC_HEADER_BYTES);
    int32_t h[8];
    for (int i = 0; i < 8; i++)
        h[i] = rd_i32(p + 4 * i);
    if (h[0] != LLM_LLMC_MAGIC)
        return llm_err(st, LLM_EDATA, "bad llm.c magic %d (want %d)", h[0], LLM_LLMC_MAGIC);
    if (h[1] != 3 && h[1] != 5)
        return llm_err(st, LLM_EDATA, "llm.c version %d is not supported (3: fp32, 5: bf16)", h[1]);
    info->version = h[1];
    info->elem_size = h[1] == 3 ? 4 : 2;
    llm_model_config *c = &info->cfg;
    snprintf(c->arch, sizeof c->arch, "gpt2");
    c->max_seq_len = h[2];
    c->vocab_size = h[3];
    c->n_layer = h[4];
    c->n_head = h[5];
    c->n_embd = h[6];
    c->padded_vocab = h[7];
    if (h[7] < 1)
        return llm_err(st, LLM_EDATA, "llm.c padded vocab %d is invalid", h[7]);
    int rc = llm_model__validate(c, st);
    if (rc)
        return llm_err_prefix(st, "llm.c header");
    info->nparams = llm_model_num_params(c);
    uint64_t want = LLM_LLMC_HEADER_BYTES + (uint64_t)info->nparams * info->elem_size;
    if (file_size < want)
        return llm_err(st, LLM_EDATA, "llm.c file truncated: %llu bytes, the header describes %llu",
                       (unsigned long long)file_size, (unsigned long long)want);
    if (file_size > want)
        return llm_err(st, LLM_EDATA, "llm.c file has %llu trailing bytes after the parameters",
                       (unsigned long long)(file_size - want));
    return LLM_OK;
}

/* ---- whole-file input: mmap for regular files, read into memory for pipes ---- */

/* How much of a stream whose first n bytes are b to read: what its header describes (+1,
 * so that a longer stream shows as one), nothing more once it is not an llm.c header
 * (the parse names what is wrong), else unbounded. */
static uint64_t stream_limit(const unsigned char *b, size_t n)
{
    if (n >= 4 && rd_i32(b) != LLM_LLMC_MAGIC)
        return n;
    if (n < LLM_LLMC_HEADER_BYTES)
        return UINT64_MAX;
    llm_llmc_info info;
    llm_status st = {0};   /* fails on the size (none given): info has the header's shape */
    llm_llmc_parse_header(b, n, UINT64_MAX, &info, &st);
    if (!info.nparams)
        return n;
    return LLM_LLMC_HEADER_BYTES + (uint64_t)info.nparams * info.elem_size + 1;
}

typedef struct {
    unsigned char *data;
    size_t size;
    int mapped;
} blob;

static void blob_free(blob *b)
{
    if (b->mapped && b->data)
        munmap(b->data, b->size);
    else
        free(b->data);
    memset(b, 0, sizeof *b);
}

static int blob_read(blob *b, const char *path, llm_status *st)
{
    memset(b, 0, sizeof *b);
    int fd = strcmp(path, "-") == 0 ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return llm_err(st, LLM_ENOINPUT, "cannot open '%s': %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode)) {
        b->size = (size_t)sb.st_size;
        if (b->size > 0) {
            void *p = mmap(NULL, b->size, PROT_READ, MAP_PRIVATE, fd, 0);
            if (p == MAP_FAILED) {
                int e = errno;
                if (fd != STDIN_FILENO)
                    close(fd);
                return llm_err(st, LLM_EIO, "cannot map '%s': %s", path, strerror(e));
            }
            b->data = p;
            b->mapped = 1;
        }
        if (fd != STDIN_FILENO)
            close(fd);
        return LLM_OK;
    }
    /* A pipe or device: grow geometrically up to what the header describes. */
    size_t cap = 1 << 16;
    b->data = malloc(cap);
    uint64_t limit = UINT64_MAX;   /* fixed once the header decides it (parsed once) */
    for (;;) {
        if (limit == UINT64_MAX && b->data)
            limit = stream_limit(b->data, b->size);
        if (b->size >= limit)
            break;
        if (!b->data) {
            if (fd != STDIN_FILENO)
                close(fd);
            return llm_err(st, LLM_ENOMEM, "'%s': out of memory", path);
        }
        if (b->size == cap) {
            unsigned char *n = cap > SIZE_MAX / 2 ? NULL : realloc(b->data, cap * 2);
            if (!n) {
                free(b->data);
                b->data = NULL;
                continue;
            }
            b->data = n;
            cap *= 2;
        }
        size_t room = cap - b->size;
        if (limit - b->size < room)
            room = (size_t)(limit - b->size);
        ssize_t r = read(fd, b->data + b->size, room);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;
            if (fd != STDIN_FILENO)
                close(fd);
            blob_free(b);
            return llm_err(st, LLM_EIO, "cannot read '%s': %s", path, strerror(e));
        }
        if (r == 0)
            break;
        b->size += (size_t)r;
    }
    if (fd != STDIN_FILENO)
        close(fd);
    return LLM_OK;
}

/* llm.c's array index (0 wte, 1 wpe, 2..13 per-layer kinds, 14 lnfw, 15 lnfb) for view i,
 * and the element offset of view i inside the llm.c parameter block. */
static size_t llmc_offset(const llm_param_view *views, int nviews, int L, int i)
{
    if (i < 2 || i >= nviews - 2)
        return views[i].offset;   /* wte, wpe, lnf: the same place in both layouts */
    int l = (i - 2) / PV_PER_LAYER, k = (i - 2) % PV_PER_LAYER;
    size_t start = views[PV_LAYER(0, 0)].offset;
    for (int kk = 0; kk < k; kk++)
        start += (size_t)L * views[PV_LAYER(0, kk)].numel;
    return start + (size_t)l * views[i].numel;
}

int llm_llmc_import(const char *in, const char *out, llm_status *st)
{
    blob b;
    int rc = blob_read(&b, in, st);
    if (rc)
        return rc;
    llm_llmc_info info;
    llm_param_view *views = NULL;
    int nviews = 0;
    llm_ckpt_writer *w = NULL;
    if ((rc = llm_llmc_parse_header(b.data, b.size, b.size, &info, st))) {
        llm_err_prefix(st, "%s", in);
        goto done;
    }
    if (llm_model__views(&info.cfg, &views, &nviews) != 0) {
        rc = llm_err(st, LLM_ENOMEM, "out of memory");
        goto done;
    }
    if ((rc = llm_ckpt_writer_new(&w, st)))
        goto done;
    llm_node *sec = llm_model_config_node(&info.cfg);
    if (!sec) {
        rc = llm_err(st, LLM_ENOMEM, "out of memory");
        goto done;
    }
    if ((rc = llm_ckpt_set_section(w, "model", sec, st)))
        goto done;
    const unsigned char *data = b.data + LLM_LLMC_HEADER_BYTES;
    llm_dtype dt = info.version == 3 ? LLM_DT_F32 : LLM_DT_BF16;
    for (int i = 0; i < nviews; i++) {
        size_t off = llmc_offset(views, nviews, info.cfg.n_layer, i);
        if ((rc = llm_ckpt_add(w, views[i].name, dt, views[i].ndim, views[i].shape,
                               data + off * info.elem_size, 0, st)))
            goto done;
    }
    rc = llm_ckpt_write(w, out, st);
done:
    llm_ckpt_writer_free(w);
    free(views);
    blob_free(&b);
    return rc;
}

/* ---- export ---- */

/* Tensor t's data as dtype dt (f32 or bf16) to o: as stored, or through f32. */
static int put_as(llm_afile *o, const llm_tensor *t, llm_dtype dt, llm_status *st)
{
    if (t->dtype == dt)
        return llm_afile_put(o, t->data, t->nbytes, st);
    uint64_t nb = 0;
    llm_dtype_nbytes(dt, t->nelem, &nb);
    float *f = malloc(t->nelem * sizeof *f + 1);
    void *b = dt == LLM_DT_F32 ? (void *)f : malloc(nb + 1);
    int rc = !f || !b ? llm_err(st, LLM_ENOMEM, "tensor '%s': out of memory", t->name) : LLM_OK;
    if (!rc && t->dtype == LLM_DT_F32)
        memcpy(f, t->data, t->nbytes);
    else if (!rc)
        rc = llm_quant_decode(t->dtype, t->data, f, t->nelem, st);
    if (!rc && dt != LLM_DT_F32 && (rc = llm_quant_encode(dt, f, b, t->nelem, st)))
        llm_err_prefix(st, "tensor '%s'", t->name);
    if (!rc)
        rc = llm_afile_put(o, b, nb, st);
    if (b != f)
        free(b);
    free(f);
    return rc;
}

int llm_llmc_export(const char *in, const char *out, char *note, size_t note_len, llm_status *st)
{
    llm_ckpt *ck = NULL;
    int rc = llm_ckpt_open(&ck, in, 0, st);
    if (rc)
        return rc;
    llm_model_config cfg;
    llm_param_view *views = NULL;
    int nviews = 0;
    const llm_tensor **ts = NULL;
    llm_afile o;
    int opened = 0;
    const llm_node *sec = llm_ckpt_section(ck, "model");
    if (!sec) {
        rc = llm_err(st, LLM_EDATA, "no model section");
        goto done;
    }
    if ((rc = llm_model_config_parse(sec, &cfg, st)))
        goto done;
    if (llm_model__views(&cfg, &views, &nviews) != 0 || !(ts = calloc((size_t)nviews, sizeof *ts))) {
        rc = llm_err(st, LLM_ENOMEM, "out of memory");
        goto done;
    }
    /* llm.c holds every parameter in one dtype: version 3 f32, version 5 bf16.  Any bf16
     * tensor makes it 5 (a model quantized to bf16 keeps wpe, the norms and the biases
     * f32: those are rounded to bf16); f16 alone widens to f32 exactly. */
    llm_dtype dt = LLM_DT_F32;
    int nconv = 0;
    if (note && note_len)
        note[0] = 0;
    for (int i = 0; i < nviews; i++) {
        const llm_tensor *t = llm_ckpt_find(ck, views[i].name);
        if (!t) {
            rc = llm_err(st, LLM_EDATA, "no tensor '%s'", views[i].name);
            goto done;
        }
        if (t->dtype != LLM_DT_F32 && t->dtype != LLM_DT_BF16 && t->dtype != LLM_DT_F16) {
            rc = llm_err(st, LLM_EDATA, "tensor '%s' is %s: llm.c files hold f32 (version 3) or bf16 "
                         "(version 5) parameters; export the model from before llm-quantize, or "
                         "quantized with --type bf16, or use export --to gguf for %s",
                         views[i].name, llm_dtype_name(t->dtype), llm_dtype_name(t->dtype));
            goto done;
        }
        if (t->dtype == LLM_DT_BF16)
            dt = LLM_DT_BF16;
        int ok = t->ndim == views[i].ndim && t->nelem == views[i].numel && t->data;
        for (int d = 0; ok && d < t->ndim; d++)
            ok = t->shape[d] == views[i].shape[d];
        if (!ok) {
            rc = llm_err(st, LLM_EDATA, "tensor '%s': shape does not match the model section",
                         views[i].name);
            goto done;
        }
        ts[i] = t;
    }
    for (int i = 0; i < nviews; i++)
        nconv += ts[i]->dtype != dt;
    if (nconv && note && note_len)
        snprintf(note, note_len, dt == LLM_DT_BF16
                     ? "%d of the %d parameter tensors rounded to bf16 (llm.c's version 5 holds "
                       "every parameter in bf16): lossy for these, which the checkpoint kept f32 or f16"
                     : "%d of the %d parameter tensors widened from f16 to f32 (llm.c's version 3 "
                       "holds every parameter in f32): exact",
                 nconv, nviews);
    if ((rc = llm_afile_open(&o, out, LLM_AFILE_STDOUT, st)))
        goto done;
    opened = 1;
    int32_t h[256] = {0};
    h[0] = LLM_LLMC_MAGIC;
    h[1] = dt == LLM_DT_F32 ? 3 : 5;
    h[2] = cfg.max_seq_len;
    h[3] = cfg.vocab_size;
    h[4] = cfg.n_layer;
    h[5] = cfg.n_head;
    h[6] = cfg.n_embd;
    h[7] = cfg.padded_vocab;
    rc = llm_afile_put(&o, h, sizeof h, st);
    int L = cfg.n_layer;
    /* llm.c order: wte, wpe, each per-layer kind over all layers, lnf. */
    for (int i = 0; !rc && i < 2; i++)
        rc = put_as(&o, ts[i], dt, st);
    for (int k = 0; !rc && k < PV_PER_LAYER; k++)
        for (int l = 0; !rc && l < L; l++)
            rc = put_as(&o, ts[PV_LAYER(l, k)], dt, st);
    for (int i = nviews - 2; !rc && i < nviews; i++)
        rc = put_as(&o, ts[i], dt, st);
    if (!rc) {
        opened = 0;
        rc = llm_afile_commit(&o, st);
    }
done:
    if (rc == LLM_EDATA)   /* what the checkpoint lacks: named with the file */
        llm_err_prefix(st, "%s", in);
    if (opened)
        llm_afile_abort(&o);
    free(ts);
    free(views);
    llm_ckpt_close(ck);
    return rc;
}
