#!/usr/bin/env python3
"""Our kernels next to DeepSeek's DeepGEMM on the same shapes, from the JSON of one device call:
bench/gpu/roofline.cu (--out roofline.json) and tools/gpu/deepgemm_anchor.py (--out deepgemm.json).

    python3 tools/gpu/anchor_table.py roofline.json deepgemm.json [--out anchors.json]

Rows: the dense FP8 linears (ours: the decode kernel v8 `fp8_gemm_stream` at m = 1 / 64, the tile kernel
`fp8_gemm` at m = 4096; DeepGEMM `fp8_gemm_nt`), the decode-form experts (ours: MXFP4 `mxfp4_experts_stream`;
DeepGEMM: FP8 `m_grouped_fp8_gemm_nt_masked`, twice our weight bytes) and the prefill-form experts (ours: the
fastest `mxfp4_prefill*` row; DeepGEMM: FP8 `m_grouped_fp8_gemm_nt_contiguous`). ratio = DeepGEMM time / ours
(> 1: ours is faster). DeepGEMM rows that carry an "error" instead of a time are listed as failed."""
import argparse
import json
import re


def shape_fields(shape: str) -> dict:
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", shape)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("roofline")
    ap.add_argument("deepgemm")
    ap.add_argument("--out")
    args = ap.parse_args()
    ours = [k for k in json.load(open(args.roofline))["kernels"] if k.get("model") == "v4"]
    deep_all = json.load(open(args.deepgemm)).get("rows", [])
    # Rows that failed on DeepGEMM's side (tools/gpu/deepgemm_anchor.py records "error" and no time) are listed,
    # not compared.
    deep = [d for d in deep_all if "us" in d]
    failed = [d for d in deep_all if "us" not in d]
    table = []

    def add(label, mine, theirs):
        if mine and theirs:
            table.append({"shape": label, "ours_kernel": mine["kernel"], "ours_us": mine["time_us"],
                          "deepgemm_kernel": theirs["kind"], "deepgemm_us": theirs["us"],
                          "deepgemm_over_ours": theirs["us"] / mine["time_us"]})

    for d in deep:
        name = d["shape"].split(" ", 1)[1]
        if d["kind"] == "fp8_gemm_nt":
            kernel = "fp8_gemm_stream" if d["m"] <= 64 else "fp8_gemm"
            mine = next((k for k in ours if k["kernel"] == kernel and k["shape"].split()[0] == name
                         and shape_fields(k["shape"]).get("m") == d["m"]), None)
            add(f"{name} m={d['m']}", mine, d)
        elif d["kind"] == "m_grouped_fp8_gemm_nt_masked":
            w = name.split()[1]
            mine = next((k for k in ours if k["kernel"] == "mxfp4_experts_stream" and k["shape"].startswith(w)
                         and abs(shape_fields(k["shape"])["groups"] - d["groups"]) <= 0.1 * d["groups"]), None)
            add(f"experts {w} decode {d['groups']}x{d['rows_per_group']}", mine, d)
        elif d["kind"] == "m_grouped_fp8_gemm_nt_contiguous":
            w = name.split()[1]
            # Correct kernels only: the *_noexpand row is a probe that skips the e2m1 expansion (wrong results).
            cands = [k for k in ours if k["kernel"].startswith("mxfp4_prefill") and "noexpand" not in k["kernel"]
                     and k["shape"].startswith(w) and shape_fields(k["shape"]).get("batch") == d["tokens"]]
            add(f"experts {w} prefill {d['tokens']} tokens", min(cands, key=lambda k: k["time_us"], default=None), d)
    print(f"{'shape':34s} {'ours':22s} {'us':>9s} {'DeepGEMM':34s} {'us':>9s} {'DG/ours':>8s}")
    for r in table:
        print(f"{r['shape']:34s} {r['ours_kernel']:22s} {r['ours_us']:9.2f} {r['deepgemm_kernel']:34s} "
              f"{r['deepgemm_us']:9.2f} {r['deepgemm_over_ours']:8.2f}")
    for d in failed:
        where = ", ".join(f"{k}={d[k]}" for k in ("m", "groups", "rows_per_group", "tokens") if k in d)
        first = (str(d.get("error", "?")).splitlines() or ["?"])[0][:160]
        print(f"DeepGEMM failed: {d['kind']} {d['shape']} {where}: {first}")
    if args.out:
        json.dump({"rows": table, "deepgemm_failed": [{k: d.get(k) for k in ("kind", "shape", "m", "n", "k", "groups",
                                                                            "rows_per_group", "tokens", "error")
                                                       if k in d} for d in failed]},
                  open(args.out, "w"), indent=2)


if __name__ == "__main__":
    main()
