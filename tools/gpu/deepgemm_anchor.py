#!/usr/bin/env python3
"""DeepSeek's own FP8 GEMMs (DeepGEMM, PyPI `deepinfer-gemm`) on the shapes of bench/gpu/roofline.cu: the anchor
that issue 4 asks for next to cuBLAS. Runs on the H200 after the sdist was built there:

    here:  tools/gpu/fetch_anchors.sh                 # downloads deepinfer_gemm-2.8.2.tar.gz into .whl/
    there: pip install --no-build-isolation --no-deps --target /tmp/site .whl/deepinfer_gemm-2.8.2.tar.gz
           PYTHONPATH=/tmp/site python3 tools/gpu/deepgemm_anchor.py --out $OUT/deepgemm.json

Shapes (V4-Flash, 128x128 weight blocks, 1x128 activation blocks, fp32 scales as on sm90): the dense FP8 linears
at m = 1, 64 and 4096, and the routed experts as a contiguous grouped GEMM (256 experts, 4096 tokens top-6,
segments padded to DeepGEMM's M alignment) with FP8 expert weights: DeepGEMM has no MXFP4 path on sm90, so this
anchors the FP8 form of the same expert GEMM (half the weight bytes per FLOP of ours is not the point here; the
grouped scheduling is). Each shape: median of 20 timed launches after 3 warm-ups (CUDA events), TFLOP/s, and a
check against a torch matmul of the dequantized operands (relative L2) so that a misuse of the API shows.
"""
import argparse
import json

import torch


def rel_l2(out: torch.Tensor, ref: torch.Tensor) -> float:
    return float((out.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-30))


def time_us(fn, reps: int = 20) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    times.sort()
    return times[len(times) // 2]


def dense(deep_gemm, cast, m: int, n: int, k: int) -> dict:
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
    xq, xs = cast.per_token_cast_to_fp8(x, use_ue8m0=False)
    wq, ws = cast.per_block_cast_to_fp8(w, use_ue8m0=False)
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    run = lambda: deep_gemm.fp8_gemm_nt((xq, xs), (wq, ws), d)  # noqa: E731
    us = time_us(run)
    xd = xq.float().view(m, k // 128, 128) * xs.unsqueeze(-1)
    wd = wq.float().view(n // 128, 128, k // 128, 128) * ws.view(n // 128, 1, k // 128, 1)
    ref = xd.view(m, k) @ wd.view(n, k).t()
    run()
    return {"kind": "fp8_gemm_nt", "m": m, "n": n, "k": k, "us": us, "tflops": 2 * m * n * k / us / 1e6,
            "gbps_weights": n * k / us / 1e3, "rel_l2_vs_dequantized_matmul": rel_l2(d, ref)}


def grouped(deep_gemm, cast, experts: int, tokens: int, top_k: int, n: int, k: int) -> dict:
    align = deep_gemm.get_mk_alignment_for_contiguous_layout()
    gen = torch.Generator(device="cpu").manual_seed(0)
    counts = torch.bincount(torch.randint(0, experts, (tokens * top_k,), generator=gen), minlength=experts)
    padded = ((counts + align - 1) // align) * align
    m = int(padded.sum())
    layout = torch.full((m,), -1, dtype=torch.int32)
    start = 0
    for e in range(experts):
        layout[start:start + int(counts[e])] = e
        start += int(padded[e])
    layout = layout.cuda()
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    xq, xs = cast.per_token_cast_to_fp8(x, use_ue8m0=False)
    w = torch.randn(experts, n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
    wq = torch.empty(experts, n, k, device="cuda", dtype=torch.float8_e4m3fn)
    ws = torch.empty(experts, n // 128, k // 128, device="cuda", dtype=torch.float)
    for e in range(experts):
        wq[e], ws[e] = cast.per_block_cast_to_fp8(w[e], use_ue8m0=False)
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    run = lambda: deep_gemm.m_grouped_fp8_gemm_nt_contiguous((xq, xs), (wq, ws), d, layout)  # noqa: E731
    us = time_us(run)
    run()
    # Spot check: the rows of expert 0 against a dequantized matmul.
    rows = (layout == 0).nonzero().flatten()
    xd = (xq[rows].float().view(-1, k // 128, 128) * xs[rows].unsqueeze(-1)).view(-1, k)
    wd = (wq[0].float().view(n // 128, 128, k // 128, 128) * ws[0].view(n // 128, 1, k // 128, 1)).view(n, k)
    flops = 2 * int(counts.sum()) * n * k
    return {"kind": "m_grouped_fp8_gemm_nt_contiguous", "experts": experts, "tokens": tokens, "top_k": top_k,
            "n": n, "k": k, "rows_padded": m, "us": us, "tflops": flops / us / 1e6,
            "rel_l2_expert0_vs_dequantized_matmul": rel_l2(d[rows], xd @ wd.t())}


def masked(deep_gemm, cast, groups: int, rows_per_group: int, n: int, k: int) -> dict:
    """The decode form of the expert GEMM (DeepGEMM's masked grouped layout): `groups` experts touched with
    `rows_per_group` tokens each, e.g. batch 1 top-6 = 6 groups of 1 row. FP8 weights: the bytes an FP8 expert
    stack would stream (ours stream MXFP4, half of them), so GB/s is the comparable figure."""
    m_max = max(64, ((rows_per_group + 63) // 64) * 64)
    x = torch.randn(groups, m_max, k, device="cuda", dtype=torch.bfloat16)
    xq = torch.empty(groups, m_max, k, device="cuda", dtype=torch.float8_e4m3fn)
    xs = torch.empty(groups, m_max, k // 128, device="cuda", dtype=torch.float)
    w = torch.randn(groups, n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
    wq = torch.empty(groups, n, k, device="cuda", dtype=torch.float8_e4m3fn)
    ws = torch.empty(groups, n // 128, k // 128, device="cuda", dtype=torch.float)
    for g in range(groups):
        xq[g], xs[g] = cast.per_token_cast_to_fp8(x[g], use_ue8m0=False)
        wq[g], ws[g] = cast.per_block_cast_to_fp8(w[g], use_ue8m0=False)
    masked_m = torch.full((groups,), rows_per_group, device="cuda", dtype=torch.int32)
    d = torch.empty(groups, m_max, n, device="cuda", dtype=torch.bfloat16)
    run = lambda: deep_gemm.m_grouped_fp8_gemm_nt_masked((xq, xs), (wq, ws), d, masked_m,  # noqa: E731
                                                         rows_per_group)
    us = time_us(run)
    run()
    xd = (xq[0, :rows_per_group].float().view(-1, k // 128, 128) * xs[0, :rows_per_group].unsqueeze(-1)).view(-1, k)
    wd = (wq[0].float().view(n // 128, 128, k // 128, 128) * ws[0].view(n // 128, 1, k // 128, 1)).view(n, k)
    weight_bytes = groups * n * (k + 4 * (k // 128) / 128)
    return {"kind": "m_grouped_fp8_gemm_nt_masked", "groups": groups, "rows_per_group": rows_per_group, "n": n,
            "k": k, "us": us, "gbps_weights": weight_bytes / us / 1e3,
            "tflops": 2 * groups * rows_per_group * n * k / us / 1e6,
            "rel_l2_group0_vs_dequantized_matmul": rel_l2(d[0, :rows_per_group], xd @ wd.t())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import deep_gemm
    from deep_gemm.utils import math as cast
    rows = []
    for m in (1, 64, 4096):
        for name, n, k in (("wq_a", 1024, 4096), ("wq_b", 32768, 1024), ("wo_b", 4096, 8192),
                           ("shared_w13", 4096, 4096), ("shared_w2", 4096, 2048)):
            r = dense(deep_gemm, cast, m, n, k)
            r["shape"] = f"v4 {name}"
            rows.append(r)
            print(f"{r['kind']:34s} {r['shape']:16s} m={m:5d} {r['us']:9.2f} us {r['tflops']:8.1f} TFLOP/s "
                  f"rel_l2 {r['rel_l2_vs_dequantized_matmul']:.1e}", flush=True)
    for name, n, k in (("experts w13", 4096, 4096), ("experts w2", 4096, 2048)):
        r = grouped(deep_gemm, cast, 256, 4096, 6, n, k)
        r["shape"] = f"v4 {name}"
        rows.append(r)
        print(f"{r['kind']:34s} {r['shape']:16s} {r['us']:9.2f} us {r['tflops']:8.1f} TFLOP/s "
              f"rel_l2 {r['rel_l2_expert0_vs_dequantized_matmul']:.1e}", flush=True)
    # Decode-form experts: batch 1 (6 experts x 1 token), batch 8 (~48 experts x 1), batch 64 (~200 experts x ~2).
    for groups, rows_per_group in ((6, 1), (48, 1), (200, 2)):
        for name, n, k in (("experts w13", 4096, 4096), ("experts w2", 4096, 2048)):
            r = masked(deep_gemm, cast, groups, rows_per_group, n, k)
            r["shape"] = f"v4 {name}"
            rows.append(r)
            print(f"{r['kind']:34s} {r['shape']:16s} {groups:3d}x{rows_per_group} {r['us']:9.2f} us "
                  f"{r['gbps_weights']:8.1f} GB/s rel_l2 {r['rel_l2_group0_vs_dequantized_matmul']:.1e}", flush=True)
    with open(args.out, "w") as f:
        json.dump({"package": "deepinfer-gemm", "version": getattr(deep_gemm, "__version__", "?"),
                   "device": torch.cuda.get_device_name(), "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
