#!/usr/bin/env python3
"""gemm_args_check.py — checks, on the CPU, the cuBLAS argument lists of the CUDA
backend's GEMM call sites (kernels/cuda/cuda_matmul.cu, cuda_attention.cu, and the
cuBLASLt layouts and cublasGemmEx fallback of cuda_lo.cu).

cuBLAS is emulated exactly (column-major, op flags, leading dimensions, batch strides,
on flat arrays); lc_gemm_rm's row-major-to-column-major swap and each call's arguments
are copied here as written in the .cu files, then matmul and attention forward/backward
are compared with plain numpy.  Run: /usr/bin/python3 tests/gpu/gemm_args_check.py
(needs numpy).  Keep the call lists in sync with the .cu files."""
import numpy as np
from numpy.lib.stride_tricks import as_strided

rng = np.random.default_rng(1)

def cublas_sgemm(opa, opb, m, n, k, alpha, A, aoff, lda, B, boff, ldb, beta, C, coff, ldc):
    """column-major C(m,n) = alpha op(A)(m,k) op(B)(k,n) + beta C on flat float64 arrays"""
    it = A.itemsize
    if opa == 'N':   # A is (m,k) col-major: element (i,l) at i + l*lda
        Am = as_strided(A[aoff:], shape=(m, k), strides=(it, lda * it))
    else:            # A stored (k,m): op(A)(i,l) = A[l + i*lda]
        Am = as_strided(A[aoff:], shape=(m, k), strides=(lda * it, it))
    if opb == 'N':
        Bm = as_strided(B[boff:], shape=(k, n), strides=(it, ldb * it))
    else:
        Bm = as_strided(B[boff:], shape=(k, n), strides=(ldb * it, it))
    assert m <= ldc or n == 1
    res = alpha * (Am @ Bm)
    for j in range(n):
        for i in range(m):
            idx = coff + i + j * ldc
            C[idx] = res[i, j] + (beta * C[idx] if beta != 0 else 0.0)

def gemm_rm(ta, tb, m, n, k, alpha, A, aoff, lda, sA, B, boff, ldb, sB, beta, C, coff, ldc, sC, batch):
    """lc_gemm_rm exactly: swap operands, same flags"""
    oa = 'T' if ta else 'N'
    ob = 'T' if tb else 'N'
    for i in range(batch):
        cublas_sgemm(ob, oa, n, m, k, alpha, B, boff + i * sB, ldb, A, aoff + i * sA, lda,
                     beta, C, coff + i * sC, ldc)

def check(name, got, want):
    err = np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30)
    print(f"{name:28s} {err:.2e} {'PASS' if err < 1e-10 else 'FAIL'}")
    return err < 1e-10

ok = True
# ---- matmul (cuda_matmul.cu) ----
N, C, OC = 5, 7, 3
inp = rng.standard_normal(N * C); w = rng.standard_normal(OC * C)
out = np.zeros(N * OC)
gemm_rm(0, 1, N, OC, C, 1.0, inp, 0, C, 0, w, 0, C, 0, 0.0, out, 0, OC, 0, 1)
ok &= check("matmul_forward", out.reshape(N, OC), inp.reshape(N, C) @ w.reshape(OC, C).T)
dout = rng.standard_normal(N * OC)
dinp = rng.standard_normal(N * C); dinp0 = dinp.copy()
gemm_rm(0, 0, N, C, OC, 1.0, dout, 0, OC, 0, w, 0, C, 0, 1.0, dinp, 0, C, 0, 1)
ok &= check("matmul_backward dinp", dinp.reshape(N, C),
            dinp0.reshape(N, C) + dout.reshape(N, OC) @ w.reshape(OC, C))
dw = rng.standard_normal(OC * C); dw0 = dw.copy()
gemm_rm(1, 0, OC, C, N, 1.0, dout, 0, OC, 0, inp, 0, C, 0, 1.0, dw, 0, C, 0, 1)
ok &= check("matmul_backward dw", dw.reshape(OC, C),
            dw0.reshape(OC, C) + dout.reshape(N, OC).T @ inp.reshape(N, C))
# gemv for dbias: column-major (OC,N) ld OC times ones(N)
dbias = dout.reshape(N, OC).T.sum(1)  # what cublasSgemv(N, OC, N, dout, OC, ones) computes
Dcm = as_strided(dout, shape=(OC, N), strides=(8, OC * 8))
ok &= check("matmul_backward dbias (gemv)", Dcm @ np.ones(N), dbias)

# ---- attention (cuda_attention.cu) ----
B, T, C, NH = 2, 5, 12, 3
hs = C // NH
scale = 1 / np.sqrt(hs)
qkv = rng.standard_normal(B * T * 3 * C)
tt = T * T
att = np.zeros(B * NH * tt)
outa = np.zeros(B * T * C)
for b in range(B):
    q = b * T * 3 * C; k = q + C
    a = b * NH * tt
    gemm_rm(0, 1, T, T, hs, scale, qkv, q, 3 * C, hs, qkv, k, 3 * C, hs, 0.0, att, a, T, tt, NH)
A4 = att.reshape(B, NH, T, T)
Q = qkv.reshape(B, T, 3, NH, hs)[:, :, 0].transpose(0, 2, 1, 3)
K = qkv.reshape(B, T, 3, NH, hs)[:, :, 1].transpose(0, 2, 1, 3)
Vv = qkv.reshape(B, T, 3, NH, hs)[:, :, 2].transpose(0, 2, 1, 3)
S = Q @ K.transpose(0, 1, 3, 2) * scale
ok &= check("attention scores", A4, S)
mask = np.tril(np.ones((T, T), bool))
P = np.where(mask, np.exp(S - np.where(mask, S, -np.inf).max(-1, keepdims=True)), 0)
P = P / P.sum(-1, keepdims=True)
att = P.reshape(-1).copy()   # the softmax kernel's result
for b in range(B):
    v = b * T * 3 * C + 2 * C
    a = b * NH * tt
    gemm_rm(0, 0, T, hs, T, 1.0, att, a, T, tt, qkv, v, 3 * C, hs, 0.0, outa, b * T * C, C, hs, NH)
O = (P @ Vv).transpose(0, 2, 1, 3).reshape(B, T, C)
ok &= check("attention out", outa.reshape(B, T, C), O)

dout = rng.standard_normal(B * T * C)
dqkv = rng.standard_normal(B * T * 3 * C); dqkv0 = dqkv.copy()
datt = np.zeros(NH * tt)
dO = dout.reshape(B, T, NH, hs).transpose(0, 2, 1, 3)
dA = dO @ Vv.transpose(0, 1, 3, 2)
dV = P.transpose(0, 1, 3, 2) @ dO
dpre = P * (dA - (P * dA).sum(-1, keepdims=True)) * scale
dQ = dpre @ K
dK = dpre.transpose(0, 1, 3, 2) @ Q
for b in range(B):
    q = b * T * 3 * C; k = q + C; v = q + 2 * C
    dq = q; dk = dq + C; dv = dq + 2 * C
    a = b * NH * tt
    d = b * T * C
    gemm_rm(0, 1, T, T, hs, 1.0, dout, d, C, hs, qkv, v, 3 * C, hs, 0.0, datt, 0, T, tt, NH)
    ok &= check(f"attention datt b{b}", datt.reshape(NH, T, T), dA[b])
    gemm_rm(1, 0, T, hs, T, 1.0, att, a, T, tt, dout, d, C, hs, 1.0, dqkv, dv, 3 * C, hs, NH)
    datt = (dpre[b]).reshape(-1).copy()   # the softmax backward kernel's result
    gemm_rm(0, 0, T, hs, T, 1.0, datt, 0, T, tt, qkv, k, 3 * C, hs, 1.0, dqkv, dq, 3 * C, hs, NH)
    gemm_rm(1, 0, T, hs, T, 1.0, datt, 0, T, tt, qkv, q, 3 * C, hs, 1.0, dqkv, dk, 3 * C, hs, NH)
want = dqkv0.reshape(B, T, 3, NH, hs).copy()
want[:, :, 0] += dQ.transpose(0, 2, 1, 3)
want[:, :, 1] += dK.transpose(0, 2, 1, 3)
want[:, :, 2] += dV.transpose(0, 2, 1, 3)
ok &= check("attention dqkv", dqkv.reshape(B, T, 3, NH, hs), want)

# ---- mixed precision (cuda_lo.cu): cuBLASLt layouts + BIAS epilogue, cublasGemmEx ----
def lt_view(X, rows, cols, ld):
    """a cuBLASLt matrix layout: column-major (rows, cols) with leading dimension ld"""
    assert ld >= rows
    it = X.itemsize
    return as_strided(X, shape=(rows, cols), strides=(it, ld * it))

def cublaslt_matmul(transa, transb, A, la, B, lb, beta, D, ld, bias):
    """D = op(A) op(B) + beta D (+ bias[i] on row i): checks that the layouts agree"""
    Am, Bm = lt_view(A, *la), lt_view(B, *lb)
    opA = Am if transa == 'N' else Am.T
    opB = Bm if transb == 'N' else Bm.T
    Dv = lt_view(D, *ld)
    assert opA.shape[1] == opB.shape[0], (opA.shape, opB.shape)
    assert (opA.shape[0], opB.shape[1]) == Dv.shape, (opA.shape, opB.shape, Dv.shape)
    res = opA @ opB
    if bias is not None:
        assert len(bias) == Dv.shape[0]
        res = res + bias[:, None]
    Dv[:, :] = res + (beta * Dv if beta != 0 else 0.0)

def lo_gemm(path, ta, tb, m, n, k, A, lda, B, ldb, beta, C, ldc, bias):
    """lc_lo_gemm as written: plan layouts (lc_plan_build) or the cublasGemmEx call"""
    if path == 'lt':
        la = (k if tb else n, n if tb else k, ldb)
        lb = (m if ta else k, k if ta else m, lda)
        ldl = (n, m, ldc)
        cublaslt_matmul('T' if tb else 'N', 'T' if ta else 'N', B, la, A, lb, beta, C, ldl, bias)
    else:
        cublas_sgemm('T' if tb else 'N', 'T' if ta else 'N', n, m, k, 1.0, B, 0, ldb, A, 0, lda,
                     beta, C, 0, ldc)
        if bias is not None:   # lc_lo_bias_kernel: out[i] = product[i] + bias[i % n]
            C[:m * n] += np.tile(bias, m)   # (a lo out: the product from fp32 scratch)

def colsum_lo(d, N, OC):
    """lc_dbias_lo: R row blocks of rows_per rows, 8 row-strided threads per column"""
    R = min((N + 63) // 64, 1024)
    rows_per = (N + R - 1) // R
    part = np.zeros((R, OC))
    D = d.reshape(N, OC)
    for by in range(R):
        r0, r1 = by * rows_per, min(N, by * rows_per + rows_per)
        sh = np.zeros((8, OC))
        for ty in range(8):
            sh[ty] = D[r0 + ty:r1:8].sum(0)
        part[by] = sh.sum(0)
    return part.sum(0)

for path in ('lt', 'ex'):
    for (N, C, OC) in ((5, 7, 3), (1, 4, 9), (130, 3, 2)):
        x = rng.standard_normal(N * C); w = rng.standard_normal(OC * C)
        bias = rng.standard_normal(OC)
        out = np.zeros(N * OC)
        lo_gemm(path, 0, 1, N, OC, C, x, C, w, C, 0.0, out, OC, bias)
        ok &= check(f"lo {path} fwd {N}x{C}x{OC}", out.reshape(N, OC),
                    x.reshape(N, C) @ w.reshape(OC, C).T + bias)
        d = rng.standard_normal(N * OC)
        dinp = np.full(N * C, np.nan)   # overwritten (beta 0): never read
        lo_gemm(path, 0, 0, N, C, OC, d, OC, w, C, 0.0, dinp, C, None)
        ok &= check(f"lo {path} dinp {N}x{C}x{OC}", dinp.reshape(N, C),
                    d.reshape(N, OC) @ w.reshape(OC, C))
        dw = rng.standard_normal(OC * C); dw0 = dw.copy()
        lo_gemm(path, 1, 0, OC, C, N, d, OC, x, C, 1.0, dw, C, None)
        ok &= check(f"lo {path} dw {N}x{C}x{OC}", dw.reshape(OC, C),
                    dw0.reshape(OC, C) + d.reshape(N, OC).T @ x.reshape(N, C))
        if path == 'lt':
            ok &= check(f"lo dbias colsum {N}x{OC}", colsum_lo(d, N, OC), d.reshape(N, OC).sum(0))

print("all PASS" if ok else "SOME FAIL")
raise SystemExit(0 if ok else 1)
