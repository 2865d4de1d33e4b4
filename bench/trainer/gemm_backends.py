#!/usr/bin/python3
"""GFLOP/s of the fp32 GEMMs of one `small` training step on one thread: ATen's torch.mm (which
calls the system OpenBLAS) next to oneDNN's dnnl_sgemm (what Meridian's trainer calls), for the
forward (x w^T), input-gradient (dy w) and weight-gradient (dy^T x) products of each projection
shape. Process CPU time, best of REPEATS. Not a training benchmark (run_vs_pytorch.sh is).

usage: gemm_backends.py [REPEATS]   (OPENBLAS_CORETYPE=SkylakeX selects OpenBLAS's AVX-512 kernels)
"""
import ctypes
import sys
import time

import torch

ROWS = 8 * 256  # batch x sequence of `small`
SHAPES = [(384, 384, "wq, wo"), (384, 128, "wk, wv"), (384, 1024, "w1, w3"), (1024, 384, "w2"),
          (384, 4096, "output")]


def main():
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    torch.set_num_threads(1)
    dnnl = ctypes.CDLL("libdnnl.so.2")
    i64, f32, ptr, ch = ctypes.c_int64, ctypes.c_float, ctypes.c_void_p, ctypes.c_char
    dnnl.dnnl_sgemm.argtypes = [ch, ch, i64, i64, i64, f32, ptr, i64, ptr, i64, f32, ptr, i64]
    blas = ctypes.CDLL("libopenblas.so.0")
    blas.openblas_get_corename.restype = ctypes.c_char_p

    def sgemm(ta, tb, m, n, k, a, lda, b, ldb, c, ldc):  # row-major, as Meridian calls it
        status = dnnl.dnnl_sgemm(ta, tb, m, n, k, 1.0, a.data_ptr(), lda, b.data_ptr(), ldb, 0.0,
                                 c.data_ptr(), ldc)
        assert status == 0, status

    def best(fn):
        fn()  # warm-up
        return min(_timed(fn) for _ in range(repeats))

    print(f"OpenBLAS core: {blas.openblas_get_corename().decode()}; rows {ROWS}; "
          f"GFLOP/s by process CPU time, best of {repeats}\n")
    print("| in x out | weights | product | torch.mm (OpenBLAS) | dnnl_sgemm | ratio |")
    print("|---|---|---|---:|---:|---:|")
    for d_in, d_out, name in SHAPES:
        x, w, dy = torch.randn(ROWS, d_in), torch.randn(d_out, d_in), torch.randn(ROWS, d_out)
        y, dx, dw = torch.empty(ROWS, d_out), torch.empty(ROWS, d_in), torch.empty(d_out, d_in)
        gflop = 2.0 * ROWS * d_in * d_out / 1e9
        cases = [
            ("x w^T", lambda: torch.mm(x, w.t()),
             lambda: sgemm(b"N", b"T", ROWS, d_out, d_in, x, d_in, w, d_in, y, d_out)),
            ("dy w", lambda: torch.mm(dy, w),
             lambda: sgemm(b"N", b"N", ROWS, d_in, d_out, dy, d_out, w, d_in, dx, d_in)),
            ("dy^T x", lambda: torch.mm(dy.t(), x),
             lambda: sgemm(b"T", b"N", d_out, d_in, ROWS, dy, d_out, x, d_in, dw, d_in)),
        ]
        for product, aten, onednn in cases:
            a, o = gflop / best(aten), gflop / best(onednn)
            print(f"| {d_in} x {d_out} | {name} | {product} | {a:.0f} | {o:.0f} | {o / a:.2f}x |")
        # The two agree (up to summation order).
        sgemm(b"N", b"T", ROWS, d_out, d_in, x, d_in, w, d_in, y, d_out)
        assert torch.allclose(y, x @ w.t(), rtol=1e-4, atol=1e-3)


def _timed(fn):
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


if __name__ == "__main__":
    main()
