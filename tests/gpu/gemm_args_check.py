#!/usr/bin/env python3
"""gemm_args_check.py — checks, on the CPU, the cuBLAS argument lists of the CUDA
backend's GEMM call sites (kernels/cuda/cuda_matmul.cu, cuda_attention.cu).

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
print("all PASS" if ok else "SOME FAIL")
raise SystemExit(0 if ok else 1)
