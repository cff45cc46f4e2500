/* infer_tiles.h — the f32 matmul tiles of infer_fast.c, written once for a vector type
 * and included once per instruction set (AVX2 and AVX-512).  The includer defines:
 *   TILE_SFX   suffix of the functions made here (tile4x3_SFX, ..., block_rows_SFX)
 *   TILE_BITS  the vector width, 256 or 512 (__m256 and _mm256_* ...)
 *   TILE_TGT   the functions' target attribute
 *   TILE_HSUM(v)  the horizontal sum of a vector (a fixed order)
 * and this file undefines them at its end.
 * Every tile of one instruction set accumulates a (weight row, input row) pair in the
 * same lanes in the same order, so within a process a row's result never depends on how
 * rows are grouped (the instruction set is chosen per CPU, not per call).  No include
 * guard: meant to be included more than once. */
#define TF(name) TF2(name, TILE_SFX)
#define TF2(a, b) TF3(a, b)
#define TF3(a, b) a##_##b
#define TCAT(a, b) TCAT2(a, b)
#define TCAT2(a, b) a##b
#define TILE_V TCAT(__m, TILE_BITS)
#define TILE_W (TILE_BITS / 32)
#define TILE_ZERO() TCAT(TCAT(_mm, TILE_BITS), _setzero_ps)()
#define TILE_LOAD(p) TCAT(TCAT(_mm, TILE_BITS), _loadu_ps)(p)
#define TILE_FMA(a, b, c) TCAT(TCAT(_mm, TILE_BITS), _fmadd_ps)(a, b, c)

/* Dot products of 4 weight rows with 3 input rows (and the 4x2, 4x1, 1x2, 1x1 edge
 * cases), C floats each, written out with named accumulators so they stay in registers.
 * Every (weight row, input row) pair accumulates the same lanes in the same order in all
 * five variants, which keeps results independent of how rows are grouped. */

/* r[m * ldr + n] = the lanes of acc[m * NR + n] summed, then the tail columns c..C-1 of
 * weight row m and input row n, in that order (every tile ends the same way); each tile
 * writes its results there, ldr apart per weight row */
TILE_TGT static void
TF(tile_fin)(const TILE_V *acc, int MR, int NR, const float *w, const float *x, int C, int c,
         float *r, int ldr)
{
    for (int m = 0; m < MR; m++)
        for (int n = 0; n < NR; n++) {
            const float *wr = w + (size_t)m * C, *xr = x + (size_t)n * C;
            float s = TILE_HSUM(acc[m * NR + n]);
            for (int k = c; k < C; k++)
                s += wr[k] * xr[k];
            r[m * ldr + n] = s;
        }
}

/* 4 weight rows x 3 input rows: 12 accumulators, 7 loads per 12 FMAs (4x2: 6 per 8) */
TILE_TGT static void
TF(tile4x3)(const float *w, const float *x, int C, float *r, int ldr)
{
    const float *w0 = w, *w1 = w + C, *w2 = w + 2 * (size_t)C, *w3 = w + 3 * (size_t)C;
    const float *x0 = x, *x1 = x + C, *x2 = x + 2 * (size_t)C;
    TILE_V a00 = TILE_ZERO(), a01 = a00, a02 = a00, a10 = a00, a11 = a00, a12 = a00,
           a20 = a00, a21 = a00, a22 = a00, a30 = a00, a31 = a00, a32 = a00;
    int c = 0;
    for (; c + TILE_W <= C; c += TILE_W) {
        TILE_V v0 = TILE_LOAD(x0 + c), v1 = TILE_LOAD(x1 + c),
               v2 = TILE_LOAD(x2 + c);
        /* weight row wr's TILE_W columns times the 3 input rows, into p, q, t */
#define ROW3(wr, p, q, t)                                                               \
    do {                                                                                \
        TILE_V u_ = TILE_LOAD((wr) + c);                                                \
        p = TILE_FMA(u_, v0, p);                                                        \
        q = TILE_FMA(u_, v1, q);                                                        \
        t = TILE_FMA(u_, v2, t);                                                        \
    } while (0)
        ROW3(w0, a00, a01, a02);
        ROW3(w1, a10, a11, a12);
        ROW3(w2, a20, a21, a22);
        ROW3(w3, a30, a31, a32);
#undef ROW3
    }
    const TILE_V acc[12] = {a00, a01, a02, a10, a11, a12, a20, a21, a22, a30, a31, a32};
    TF(tile_fin)(acc, 4, 3, w, x, C, c, r, ldr);
}

TILE_TGT static void
TF(tile4x2)(const float *w, const float *x, int C, float *r, int ldr)
{
    const float *w0 = w, *w1 = w + C, *w2 = w + 2 * (size_t)C, *w3 = w + 3 * (size_t)C;
    const float *x0 = x, *x1 = x + C;
    TILE_V a00 = TILE_ZERO(), a01 = a00, a10 = a00, a11 = a00, a20 = a00, a21 = a00,
           a30 = a00, a31 = a00;
    int c = 0;
    for (; c + TILE_W <= C; c += TILE_W) {
        TILE_V v0 = TILE_LOAD(x0 + c), v1 = TILE_LOAD(x1 + c);
        TILE_V u = TILE_LOAD(w0 + c);
        a00 = TILE_FMA(u, v0, a00);
        a01 = TILE_FMA(u, v1, a01);
        u = TILE_LOAD(w1 + c);
        a10 = TILE_FMA(u, v0, a10);
        a11 = TILE_FMA(u, v1, a11);
        u = TILE_LOAD(w2 + c);
        a20 = TILE_FMA(u, v0, a20);
        a21 = TILE_FMA(u, v1, a21);
        u = TILE_LOAD(w3 + c);
        a30 = TILE_FMA(u, v0, a30);
        a31 = TILE_FMA(u, v1, a31);
    }
    const TILE_V acc[8] = {a00, a01, a10, a11, a20, a21, a30, a31};
    TF(tile_fin)(acc, 4, 2, w, x, C, c, r, ldr);
}

TILE_TGT static void
TF(tile4x1)(const float *w, const float *x, int C, float *r, int ldr)
{
    const float *w0 = w, *w1 = w + C, *w2 = w + 2 * (size_t)C, *w3 = w + 3 * (size_t)C;
    TILE_V a0 = TILE_ZERO(), a1 = a0, a2 = a0, a3 = a0;
    int c = 0;
    for (; c + TILE_W <= C; c += TILE_W) {
        TILE_V v = TILE_LOAD(x + c);
        a0 = TILE_FMA(TILE_LOAD(w0 + c), v, a0);
        a1 = TILE_FMA(TILE_LOAD(w1 + c), v, a1);
        a2 = TILE_FMA(TILE_LOAD(w2 + c), v, a2);
        a3 = TILE_FMA(TILE_LOAD(w3 + c), v, a3);
    }
    const TILE_V acc[4] = {a0, a1, a2, a3};
    TF(tile_fin)(acc, 4, 1, w, x, C, c, r, ldr);
}

TILE_TGT static void
TF(tile1x2)(const float *w, const float *x, int C, float *r)
{
    const float *x0 = x, *x1 = x + C;
    TILE_V a0 = TILE_ZERO(), a1 = a0;
    int c = 0;
    for (; c + TILE_W <= C; c += TILE_W) {
        TILE_V u = TILE_LOAD(w + c);
        a0 = TILE_FMA(u, TILE_LOAD(x0 + c), a0);
        a1 = TILE_FMA(u, TILE_LOAD(x1 + c), a1);
    }
    const TILE_V acc[2] = {a0, a1};
    TF(tile_fin)(acc, 1, 2, w, x, C, c, r, 0);
}

TILE_TGT static float TF(tile1x1)(const float *w, const float *x, int C)
{
    TILE_V a0 = TILE_ZERO();
    int c = 0;
    for (; c + TILE_W <= C; c += TILE_W)
        a0 = TILE_FMA(TILE_LOAD(w + c), TILE_LOAD(x + c), a0);
    float res;
    TF(tile_fin)(&a0, 1, 1, w, x, C, c, &res, 1);
    return res;
}

TILE_TGT static void
TF(block_rows)(float *out, const float *inp, const float *W, const float *bias, int N, int C,
           int OC, int o0, int MR)
{
    float res[4][3];
    const float *w = W + (size_t)o0 * C;
    for (int n = 0; n < N; n += 3) {
        int NR = N - n >= 3 ? 3 : N - n;
        const float *x = inp + (size_t)n * C;
        if (MR == 4 && NR == 3) TF(tile4x3)(w, x, C, &res[0][0], 3);
        else if (MR == 4 && NR == 2) TF(tile4x2)(w, x, C, &res[0][0], 3);
        else if (MR == 4) TF(tile4x1)(w, x, C, &res[0][0], 3);
        else {   /* the last weight rows, fewer than 4 */
            for (int m = 0; m < MR; m++) {
                const float *wm = w + (size_t)m * C;
                if (NR >= 2) TF(tile1x2)(wm, x, C, res[m]);
                if (NR == 3) res[m][2] = TF(tile1x1)(wm, x + 2 * (size_t)C, C);
                if (NR == 1) res[m][0] = TF(tile1x1)(wm, x, C);
            }
        }
        for (int r = 0; r < NR; r++)
            for (int m = 0; m < MR; m++)
                out[(size_t)(n + r) * OC + o0 + m] = res[m][r] + (bias ? bias[o0 + m] : 0.0f);
    }
}


#undef TF
#undef TF2
#undef TF3
#undef TCAT
#undef TCAT2
#undef TILE_V
#undef TILE_W
#undef TILE_ZERO
#undef TILE_LOAD
#undef TILE_FMA
#undef TILE_SFX
#undef TILE_BITS
#undef TILE_TGT
#undef TILE_HSUM
