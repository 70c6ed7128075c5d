#!/usr/bin/env python3
"""DeepSeek's own FP8 GEMMs (DeepGEMM, PyPI `deepinfer-gemm` 2.8.2) on the shapes of bench/gpu/roofline.cu: the
anchor that issue 4 asks for next to cuBLAS. Runs on the H200 after the sdist was built there:

    here:  tools/gpu/fetch_anchors.sh                 # downloads deepinfer_gemm-2.8.2.tar.gz into .whl/
    there: CPATH=$PWD/.whl/include python3 -m pip install -q --no-index --no-deps --no-build-isolation \\
               --target /tmp/anchors .whl/deepinfer_gemm-*.tar.gz
           PYTHONPATH=/tmp/anchors python3 -X faulthandler -u tools/gpu/deepgemm_anchor.py --out $OUT/deepgemm.json
    (tools/gpu/deepgemm_diag.sh does both and probes each stage; bench/gpu/NOTES.md "DeepGEMM anchor on sm90".)

Shapes (V4-Flash, 128x128 weight blocks, 1x128 activation blocks, FP32 scales as on sm90): the dense FP8 linears
at m = 4096, 64 and 1 (largest m first: the most standard path), the routed experts as a contiguous grouped GEMM
(256 experts, 4096 tokens top-6, segments padded to DeepGEMM's M alignment) and as the masked grouped GEMM of
decode, with FP8 expert weights: DeepGEMM has no MXFP4 path on sm90, so this anchors the FP8 form of the same
expert GEMM. Each shape: one untimed first call (JIT compile + load), median of 20 timed launches after 3 warm-ups
(CUDA events), TFLOP/s, and a check against a torch matmul of the dequantized operands (relative L2).

The sm90 recipe as the package's source has it (csrc/apis/gemm.hpp, csrc/apis/layout.hpp, csrc/utils/layout.hpp):
FP32 scales, default recipe (1, 128, 128); SFB [n/128, k/128] row-major as per_block_cast_to_fp8 makes it; SFA
transformed to MN-major TMA-aligned FP32 (get_mn_major_tma_aligned_tensor). The API would do that transform inside
every call (a JIT'd transpose kernel launched per call); here it is done once per shape outside the timing, so that
the time is the GEMM kernel's alone, as DeepGEMM's own benchmarks time it.

Environment set before deep_gemm is imported (its JIT, third-party/deep_jit, reads it at the first kernel call):
CUDA_HOME (else deep_jit runs `which nvcc` through popen and throws/catches a C++ exception when that fails),
DG_JIT_CACHE_DIR (else $HOME/.dj, and an empty HOME is a C++ assertion), HOME, PATH with $CUDA_HOME/bin. Every
C++ exception deep_jit throws builds a backtrace through dlopen("libdw.so.1") (deep_jit/utils/exception.hpp);
--libdw stub (the default) loads a stub library under that soname first so that no backtrace is attempted and
errors surface as Python exceptions (a suspected segfault, see NOTES.md); --libdw system leaves it alone. When
LD_LIBRARY_PATH holds the CUDA toolkit's library directories (tools/gpu/run_prebuilt.sh exports them) and torch
brings its own CUDA libraries, the script re-executes itself without them (--keep-ld-library-path: don't).
--raw undoes all of this (the first version's conditions, for tools/gpu/deepgemm_diag.sh).

Robustness: a progress line before each shape, each shape's Python exception caught and recorded in the JSON
(row with "error", no "us"), the JSON rewritten after every shape. With --jobs N (default: half the cores, at most
8) the first calls of all shapes run first in N worker processes (the JIT compiles, one nvcc each, in parallel,
into the shared disk cache); a worker that dies (segfault) marks the shape it was on as crashed, which the main
process then skips instead of dying on it, and a new worker takes the rest of that worker's shapes.
"""
import argparse
import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

DENSE = (("wq_a", 1024, 4096), ("wq_b", 32768, 1024), ("wo_b", 4096, 8192), ("shared_w13", 4096, 4096),
         ("shared_w2", 4096, 2048))
EXPERTS = (("experts w13", 4096, 4096), ("experts w2", 4096, 2048))
KIND = {"dense": "fp8_gemm_nt", "contiguous": "m_grouped_fp8_gemm_nt_contiguous",
        "masked": "m_grouped_fp8_gemm_nt_masked"}


def log(msg: str) -> None:
    print(msg, flush=True)


# ----------------------------------------------------------------------------------------------------------------
# Environment (before `import deep_gemm`)
# ----------------------------------------------------------------------------------------------------------------

def prepare_env(cache_dir: str) -> dict:
    """Set what DeepGEMM's JIT reads: where nvcc is, where the kernel cache goes. Returns a summary for the JSON."""
    info = {}
    if not os.environ.get("HOME"):
        os.environ["HOME"] = tempfile.gettempdir()
        info["home_was_unset"] = True
    cache = os.environ.get("DG_JIT_CACHE_DIR") or cache_dir or os.path.join(tempfile.gettempdir(), "deepgemm_jit")
    first = cache.split(":")[0]
    os.makedirs(first, exist_ok=True)
    fd, probe = tempfile.mkstemp(dir=first)  # raises if the cache root is not writable
    os.close(fd)
    os.unlink(probe)
    os.environ["DG_JIT_CACHE_DIR"] = cache
    if not os.environ.get("CUDA_HOME") and not os.environ.get("CUDA_PATH"):
        found = shutil.which("nvcc")
        os.environ["CUDA_HOME"] = "/usr/local/cuda" if os.access("/usr/local/cuda/bin/nvcc", os.X_OK) or not found \
            else os.path.dirname(os.path.dirname(os.path.realpath(found)))
    cuda_home = os.environ.get("CUDA_HOME") or os.environ["CUDA_PATH"]
    nvcc = os.environ.get("DG_JIT_NVCC_COMPILER") or os.environ.get("DJ_JIT_NVCC_COMPILER") or \
        os.path.join(cuda_home, "bin", "nvcc")
    os.environ["PATH"] = os.path.join(cuda_home, "bin") + os.pathsep + os.environ.get("PATH", "")
    info.update({"CUDA_HOME": cuda_home, "nvcc": nvcc, "nvcc_executable": os.access(nvcc, os.X_OK)})
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
        info["nvcc_version"] = [l for l in out.splitlines() if "release" in l][-1].strip()
    except Exception as e:  # noqa: BLE001
        info["nvcc_version"] = f"failed: {e}"
    info["host_cc"] = shutil.which("g++") or shutil.which("c++")
    info["env"] = {k: v for k, v in sorted(os.environ.items())
                   if k.startswith(("DG_", "DJ_", "CUDA_")) or k in ("HOME", "LD_LIBRARY_PATH", "PYTHONPATH")}
    return info


def shadow_libdw(directory: str) -> str:
    """deep_jit's exception constructor dlopens libdw.so.1 and walks the process's modules for a C++ backtrace
    (third-party/deep_jit/include/deep_jit/utils/exception.hpp). glibc's dlopen returns an already loaded object
    whose SONAME matches, so a stub loaded first under that soname, whose dwfl_begin returns NULL, turns the
    backtrace off (DwflApi::valid() is false) and leaves the message itself intact."""
    lib = os.path.join(directory, "libdw.so.1")
    if not os.path.exists(lib):  # the main process builds it; warm-up workers only load it
        cc = shutil.which("cc") or shutil.which("gcc")
        if not cc:
            return "not shadowed: no C compiler"
        os.makedirs(directory, exist_ok=True)
        src, tmp = os.path.join(directory, f"libdw_stub.{os.getpid()}.c"), f"{lib}.{os.getpid()}"
        with open(src, "w") as f:
            f.write("void *dwfl_begin(const void *callbacks) { (void)callbacks; return 0; }\n")
        r = subprocess.run([cc, "-shared", "-fPIC", "-Wl,-soname,libdw.so.1", "-o", tmp, src],
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            return f"not shadowed: cc failed: {r.stderr.strip()[:300]}"
        os.replace(tmp, lib)
    ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
    return f"shadowed by {lib}"


def unbuffer_c_stdout() -> None:
    """DeepGEMM prints (DG_PRINT_CONFIGS, DG_JIT_PRINT_COMPILER_COMMAND) go through C stdio, which a pipe makes
    fully buffered: lost in a crash. Make C stdout unbuffered."""
    try:
        libc = ctypes.CDLL(None)
        libc.setvbuf(ctypes.c_void_p.in_dll(libc, "stdout"), None, 2, 0)  # _IONBF
    except Exception:  # noqa: BLE001
        pass


def torch_bundles_cuda_libs() -> bool:
    """True when the installed PyTorch brings its own CUDA libraries (pip wheels: nvidia/*/lib/libcudart.so*)."""
    import glob
    import importlib.util
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return False
    roots = list(spec.submodule_search_locations or []) if spec else []
    return any(glob.glob(os.path.join(r, "*", "lib", "libcudart.so*")) or
               glob.glob(os.path.join(r, "*", "*", "lib", "libcudart.so*")) for r in roots)


def drop_toolkit_ld_library_path() -> None:
    """tools/gpu/run_prebuilt.sh exports LD_LIBRARY_PATH=/usr/local/cuda/lib64:... for our binaries. In a Python
    process that makes torch (whose libraries find their CUDA libraries through RUNPATH, which LD_LIBRARY_PATH
    overrides) load the system toolkit's cudart/cuBLAS/cuBLASLt instead of the ones its wheel was built with, and
    DeepGEMM's first call is the process's first cuBLASLt use (cublasLtCreate). The loader reads LD_LIBRARY_PATH
    once, at start, so the script re-executes itself without the directories that hold libcudart/libcublasLt,
    when torch brings its own (a marker variable stops a second round)."""
    if os.environ.get("DEEPGEMM_ANCHOR_LD_DROPPED") is not None:
        return
    parts = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p]
    import glob
    drop = [p for p in parts
            if glob.glob(os.path.join(p, "libcudart.so*")) or glob.glob(os.path.join(p, "libcublasLt.so*"))]
    if not drop or not torch_bundles_cuda_libs():
        return
    keep = [p for p in parts if p not in drop]
    if keep:
        os.environ["LD_LIBRARY_PATH"] = ":".join(keep)
    else:
        os.environ.pop("LD_LIBRARY_PATH", None)
    os.environ["DEEPGEMM_ANCHOR_LD_DROPPED"] = ":".join(drop)
    argv = list(getattr(sys, "orig_argv", []))[1:] or \
        ["-X", "faulthandler", "-u", os.path.abspath(__file__)] + sys.argv[1:]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable] + argv)


def loaded_libdw() -> list:
    try:
        with open("/proc/self/maps") as f:
            return sorted({l.split()[-1] for l in f if "libdw" in l and "/" in l})
    except OSError:
        return []


# ----------------------------------------------------------------------------------------------------------------
# Shapes
# ----------------------------------------------------------------------------------------------------------------

def plan(smoke: str) -> list:
    if smoke:  # one dense GEMM "m,n,k" (default 4096,4096,4096: the most standard sm90 1D2D path)
        m, n, k = (int(v) for v in smoke.split(","))
        name = next((nm for nm, nn, kk in DENSE if (nn, kk) == (n, k)), f"dense_{n}x{k}")
        return [{"kind": "dense", "name": name, "m": m, "n": n, "k": k}]
    shapes = [{"kind": "dense", "name": name, "m": m, "n": n, "k": k} for m in (4096, 64, 1) for name, n, k in DENSE]
    shapes += [{"kind": "contiguous", "name": name, "experts": 256, "tokens": 4096, "top_k": 6, "n": n, "k": k}
               for name, n, k in EXPERTS]
    # Decode-form experts: batch 1 (6 experts x 1 token), batch 8 (~48 experts x 1), batch 64 (~200 experts x ~2).
    shapes += [{"kind": "masked", "name": name, "groups": g, "rows_per_group": r, "n": n, "k": k}
               for g, r in ((6, 1), (48, 1), (200, 2)) for name, n, k in EXPERTS]
    return shapes


def describe(s: dict) -> str:
    if s["kind"] == "dense":
        return f"dense m={s['m']} n={s['n']} k={s['k']} (v4 {s['name']})"
    if s["kind"] == "contiguous":
        return (f"contiguous experts={s['experts']} tokens={s['tokens']} top_k={s['top_k']} n={s['n']} k={s['k']} "
                f"(v4 {s['name']})")
    return f"masked groups={s['groups']} rows_per_group={s['rows_per_group']} n={s['n']} k={s['k']} (v4 {s['name']})"


def base_row(s: dict) -> dict:
    row = {"kind": KIND[s["kind"]], "shape": f"v4 {s['name']}"}
    row.update({k: v for k, v in s.items() if k not in ("kind", "name")})
    return row


def rel_l2(out, ref) -> float:
    return float((out.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-30))


def time_us(fn, reps: int = 20) -> float:
    import torch
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


def first_call(fn) -> float:
    import torch
    t = time.time()
    fn()
    torch.cuda.synchronize()
    return time.time() - t


def fp8_zeros(*shape):
    import torch
    return torch.zeros(*shape, device="cuda", dtype=torch.uint8).view(torch.float8_e4m3fn)


def sfa_for_sm90(dg, xs):
    """SFA as the sm90 1D2D kernel reads it: FP32, MN-major, TMA-aligned (layout.hpp's (FP32, 1, 128) case)."""
    return dg.utils.get_mn_major_tma_aligned_tensor(xs)


def dense(dg, cast, s: dict, warm: bool):
    import torch
    m, n, k = s["m"], s["n"], s["k"]
    if warm:  # same shapes, dtypes and layouts, no data: only the JIT compile matters
        xq, xs = fp8_zeros(m, k), torch.ones(m, k // 128, device="cuda")
        wq, ws = fp8_zeros(n, k), torch.ones(n // 128, k // 128, device="cuda")
    else:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
        xq, xs = cast.per_token_cast_to_fp8(x, use_ue8m0=False)
        wq, ws = cast.per_block_cast_to_fp8(w, use_ue8m0=False)
    xs_sm90 = sfa_for_sm90(dg, xs)
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    run = lambda: dg.fp8_gemm_nt((xq, xs_sm90), (wq, ws), d)  # noqa: E731
    first = first_call(run)
    if warm:
        return None
    us = time_us(run)
    xd = xq.float().view(m, k // 128, 128) * xs.unsqueeze(-1)
    wd = wq.float().view(n // 128, 128, k // 128, 128) * ws.view(n // 128, 1, k // 128, 1)
    ref = xd.view(m, k) @ wd.view(n, k).t()
    run()
    row = base_row(s)
    row.update({"us": us, "tflops": 2 * m * n * k / us / 1e6, "gbps_weights": n * k / us / 1e3,
                "rel_l2_vs_dequantized_matmul": rel_l2(d, ref), "first_call_s": first})
    return row


def contiguous(dg, cast, s: dict, warm: bool):
    import torch
    experts, tokens, top_k, n, k = s["experts"], s["tokens"], s["top_k"], s["n"], s["k"]
    align = dg.get_mk_alignment_for_contiguous_layout()
    gen = torch.Generator(device="cpu").manual_seed(0)
    counts = torch.bincount(torch.randint(0, experts, (tokens * top_k,), generator=gen), minlength=experts)
    padded = ((counts + align - 1) // align) * align
    m = int(padded.sum())
    layout = torch.full((m,), -1, dtype=torch.int32)  # per-row expert index, -1 on padding rows
    start = 0
    for e in range(experts):
        layout[start:start + int(counts[e])] = e
        start += int(padded[e])
    layout = layout.cuda()
    if warm:
        xq, xs = fp8_zeros(m, k), torch.ones(m, k // 128, device="cuda")
        wq, ws = fp8_zeros(experts, n, k), torch.ones(experts, n // 128, k // 128, device="cuda")
    else:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        xq, xs = cast.per_token_cast_to_fp8(x, use_ue8m0=False)
        wq = torch.empty(experts, n, k, device="cuda", dtype=torch.float8_e4m3fn)
        ws = torch.empty(experts, n // 128, k // 128, device="cuda", dtype=torch.float)
        for e in range(experts):
            w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
            wq[e], ws[e] = cast.per_block_cast_to_fp8(w, use_ue8m0=False)
    xs_sm90 = sfa_for_sm90(dg, xs)
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    run = lambda: dg.m_grouped_fp8_gemm_nt_contiguous((xq, xs_sm90), (wq, ws), d, layout)  # noqa: E731
    first = first_call(run)
    if warm:
        return None
    us = time_us(run)
    run()
    # Spot check: the rows of expert 0 against a dequantized matmul.
    rows = (layout == 0).nonzero().flatten()
    xd = (xq[rows].float().view(-1, k // 128, 128) * xs[rows].unsqueeze(-1)).view(-1, k)
    wd = (wq[0].float().view(n // 128, 128, k // 128, 128) * ws[0].view(n // 128, 1, k // 128, 1)).view(n, k)
    flops = 2 * int(counts.sum()) * n * k
    row = base_row(s)
    row.update({"rows_padded": m, "us": us, "tflops": flops / us / 1e6,
                "rel_l2_expert0_vs_dequantized_matmul": rel_l2(d[rows], xd @ wd.t()), "first_call_s": first})
    return row


def masked(dg, cast, s: dict, warm: bool):
    """The decode form of the expert GEMM (DeepGEMM's masked grouped layout): `groups` experts touched with
    `rows_per_group` tokens each, e.g. batch 1 top-6 = 6 groups of 1 row. FP8 weights: the bytes an FP8 expert
    stack would stream (ours stream MXFP4, half of them), so GB/s is the comparable figure."""
    import torch
    groups, rpg, n, k = s["groups"], s["rows_per_group"], s["n"], s["k"]
    m_max = max(64, ((rpg + 63) // 64) * 64)
    if warm:
        xq, xs = fp8_zeros(groups, m_max, k), torch.ones(groups, m_max, k // 128, device="cuda")
        wq, ws = fp8_zeros(groups, n, k), torch.ones(groups, n // 128, k // 128, device="cuda")
    else:
        xq = torch.empty(groups, m_max, k, device="cuda", dtype=torch.float8_e4m3fn)
        xs = torch.empty(groups, m_max, k // 128, device="cuda", dtype=torch.float)
        wq = torch.empty(groups, n, k, device="cuda", dtype=torch.float8_e4m3fn)
        ws = torch.empty(groups, n // 128, k // 128, device="cuda", dtype=torch.float)
        for g in range(groups):
            x = torch.randn(m_max, k, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
            xq[g], xs[g] = cast.per_token_cast_to_fp8(x, use_ue8m0=False)
            wq[g], ws[g] = cast.per_block_cast_to_fp8(w, use_ue8m0=False)
    xs_sm90 = sfa_for_sm90(dg, xs)
    masked_m = torch.full((groups,), rpg, device="cuda", dtype=torch.int32)
    d = torch.empty(groups, m_max, n, device="cuda", dtype=torch.bfloat16)
    run = lambda: dg.m_grouped_fp8_gemm_nt_masked((xq, xs_sm90), (wq, ws), d, masked_m, rpg)  # noqa: E731
    first = first_call(run)
    if warm:
        return None
    us = time_us(run)
    run()
    xd = (xq[0, :rpg].float().view(-1, k // 128, 128) * xs[0, :rpg].unsqueeze(-1)).view(-1, k)
    wd = (wq[0].float().view(n // 128, 128, k // 128, 128) * ws[0].view(n // 128, 1, k // 128, 1)).view(n, k)
    weight_bytes = groups * n * (k + 4 * (k // 128) / 128)
    row = base_row(s)
    row.update({"us": us, "gbps_weights": weight_bytes / us / 1e3, "tflops": 2 * groups * rpg * n * k / us / 1e6,
                "rel_l2_group0_vs_dequantized_matmul": rel_l2(d[0, :rpg], xd @ wd.t()), "first_call_s": first})
    return row


RUN = {"dense": dense, "contiguous": contiguous, "masked": masked}


def summary_line(r: dict) -> str:
    if "error" in r:
        return f"  FAILED: {r['error'].splitlines()[0][:300]}"
    if r["kind"] == "fp8_gemm_nt":
        return (f"  {r['us']:9.2f} us {r['tflops']:8.1f} TFLOP/s rel_l2 {r['rel_l2_vs_dequantized_matmul']:.1e} "
                f"(first call {r['first_call_s']:.1f} s)")
    if r["kind"] == "m_grouped_fp8_gemm_nt_contiguous":
        return (f"  {r['us']:9.2f} us {r['tflops']:8.1f} TFLOP/s "
                f"rel_l2 {r['rel_l2_expert0_vs_dequantized_matmul']:.1e} (first call {r['first_call_s']:.1f} s)")
    return (f"  {r['us']:9.2f} us {r['gbps_weights']:8.1f} GB/s rel_l2 {r['rel_l2_group0_vs_dequantized_matmul']:.1e} "
            f"(first call {r['first_call_s']:.1f} s)")


# ----------------------------------------------------------------------------------------------------------------
# Parallel warm-up (JIT compiles) in worker processes
# ----------------------------------------------------------------------------------------------------------------

def warm_worker(dg, cast, shapes: list, ids: list) -> None:
    for i in ids:
        log(f"WARM-START {i} {describe(shapes[i])}")
        t = time.time()
        try:
            RUN[shapes[i]["kind"]](dg, cast, shapes[i], warm=True)
            log(f"WARM-DONE {i} {time.time() - t:.1f}")
        except Exception as e:  # noqa: BLE001
            log(f"WARM-ERROR {i} {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")


def warm_up(args, shapes: list, jobs: int, budget_s: float) -> dict:
    """Run every shape's first call in `jobs` worker processes, round robin; respawn after a crash."""
    t0 = time.time()
    queues = [list(range(len(shapes)))[j::jobs] for j in range(jobs)]
    tmp = tempfile.mkdtemp(prefix="dg_warm_")
    base = [sys.executable, "-X", "faulthandler", "-u", os.path.abspath(__file__), "--out", os.devnull,
            "--libdw", args.libdw, "--keep-ld-library-path"] + (["--smoke", args.smoke] if args.smoke else []) + \
        (["--no-env-fix"] if args.no_env_fix else [])
    running, done, errors, crashed, spawned = [], set(), {}, {}, 0

    def spawn(ids):
        nonlocal spawned
        path = os.path.join(tmp, f"worker{spawned}.log")
        spawned += 1
        f = open(path, "w")
        p = subprocess.Popen(base + ["--warm-ids", ",".join(map(str, ids))], stdout=f, stderr=subprocess.STDOUT)
        running.append((p, ids, path, f))

    for q in queues:
        if q:
            spawn(q)
    while running:
        time.sleep(0.5)
        over = budget_s > 0 and time.time() - t0 > budget_s
        for item in list(running):
            p, ids, path, f = item
            if p.poll() is None and not over:
                continue
            if p.poll() is None:
                p.kill()  # our own child, past the warm-up budget
                p.wait()
            f.close()
            running.remove(item)
            text = open(path, errors="replace").read()
            started, finished = [], set()
            for line in text.splitlines():
                parts = line.split(" ", 2)
                if len(parts) >= 2 and parts[0] in ("WARM-START", "WARM-DONE", "WARM-ERROR") and parts[1].isdigit():
                    i = int(parts[1])
                    if parts[0] == "WARM-START":
                        started.append(i)
                    else:
                        finished.add(i)
                        if parts[0] == "WARM-DONE":
                            done.add(i)
                        else:
                            errors[i] = parts[2] if len(parts) > 2 else "?"
            if p.returncode != 0:
                tail = "\n".join(text.splitlines()[-25:])
                log(f"warm-up worker {ids} exited rc={p.returncode}; its last lines:\n{tail}")
                victim = next((i for i in reversed(started) if i not in finished), None)
                if over:
                    continue
                if victim is None:  # died before its first shape: no respawn (it would die the same way)
                    for i in ids:
                        errors.setdefault(i, f"warm-up worker failed before any shape (rc {p.returncode})")
                    continue
                crashed[victim] = f"warm-up worker died (rc {p.returncode}) on this shape; last lines:\n{tail}"
                rest = [i for i in ids if i not in finished and i not in started]
                if rest:
                    spawn(rest)
    log(f"warm-up: {len(done)} shapes compiled in {time.time() - t0:.0f} s with {jobs} workers; "
        f"{len(errors)} Python errors, {len(crashed)} crashes")
    return {"jobs": jobs, "seconds": round(time.time() - t0, 1), "workers_spawned": spawned,
            "done": sorted(done), "errors": {str(k): v for k, v in errors.items()},
            "crashed": {str(k): v for k, v in crashed.items()}}


# ----------------------------------------------------------------------------------------------------------------

def write_json(path: str, payload: dict) -> None:
    if path == os.devnull:
        return
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(payload, f, indent=2)
    os.replace(tmp, path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--smoke", nargs="?", const="4096,4096,4096", default="",
                    help="one dense GEMM only, \"m,n,k\" (default 4096,4096,4096), for diagnostics")
    ap.add_argument("--jobs", type=int, default=None,
                    help="parallel warm-up workers (default: half the cores, at most 8; 0 = compile in-process; "
                         "--smoke defaults to 0)")
    ap.add_argument("--warm-budget-s", type=float, default=240.0, help="stop warm-up workers after this (0 = none)")
    ap.add_argument("--budget-s", type=float, default=0.0,
                    help="start no new shape after this many seconds (0 = none); the JSON holds what ran")
    ap.add_argument("--jit-cache", default="", help="DG_JIT_CACHE_DIR if unset (default: $TMPDIR/deepgemm_jit)")
    ap.add_argument("--libdw", choices=("stub", "system"), default="stub",
                    help="stub: no deep_jit C++ backtraces through libdw (see the docstring); system: leave as is")
    ap.add_argument("--keep-ld-library-path", action="store_true",
                    help="do not re-execute without the CUDA toolkit's directories in LD_LIBRARY_PATH")
    ap.add_argument("--no-env-fix", action="store_true",
                    help="set no CUDA_HOME / PATH / DG_JIT_CACHE_DIR / HOME (diagnostics: the environment as given)")
    ap.add_argument("--raw", action="store_true",
                    help="= --no-env-fix --keep-ld-library-path --libdw system: the first version's conditions")
    ap.add_argument("--warm-ids", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.raw:
        args.no_env_fix, args.keep_ld_library_path, args.libdw = True, True, "system"
    if not args.keep_ld_library_path:
        drop_toolkit_ld_library_path()  # may re-execute this script
    t0 = time.time()
    worker = args.warm_ids is not None

    if args.no_env_fix:
        env = {"env_fix": False, "CUDA_HOME": os.environ.get("CUDA_HOME", "(unset)"), "nvcc_version": "(not probed)",
               "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(("DG_", "DJ_", "CUDA_"))
                       or k in ("HOME", "LD_LIBRARY_PATH", "PYTHONPATH", "PATH")}}
    else:
        env = prepare_env(args.jit_cache)
    env["ld_library_path_dropped"] = os.environ.get("DEEPGEMM_ANCHOR_LD_DROPPED", "")
    stub_dir = os.path.join((os.environ.get("DG_JIT_CACHE_DIR") or tempfile.gettempdir()).split(":")[0], "libdw_stub")
    env["libdw"] = shadow_libdw(stub_dir) if args.libdw == "stub" else "system"
    unbuffer_c_stdout()
    shapes = plan(args.smoke)
    payload = {"package": "deepinfer-gemm", "version": "?", "device": "?", "env": env, "rows": []}
    if not worker:
        log(f"deepgemm_anchor: CUDA_HOME={env['CUDA_HOME']} nvcc: {env['nvcc_version']} "
            f"DG_JIT_CACHE_DIR={os.environ.get('DG_JIT_CACHE_DIR', '(unset)')} "
            f"HOME={os.environ.get('HOME', '(unset)')} "
            f"libdw: {env['libdw']} LD_LIBRARY_PATH={os.environ.get('LD_LIBRARY_PATH', '(unset)')} "
            f"(dropped: {env['ld_library_path_dropped'] or 'none'})")
    try:
        import torch
        import deep_gemm as dg
        from deep_gemm.utils import math as cast
    except Exception as e:  # noqa: BLE001
        payload["error"] = f"import failed: {type(e).__name__}: {e}\n{traceback.format_exc()}"
        log(payload["error"])
        write_json(args.out, payload)
        sys.exit(1)
    if worker:
        warm_worker(dg, cast, shapes, [int(i) for i in args.warm_ids.split(",") if i])
        return

    cap = torch.cuda.get_device_capability()
    payload.update({"version": getattr(dg, "__version__", "?"), "deep_gemm_file": dg.__file__,
                    "device": torch.cuda.get_device_name(), "capability": f"sm_{cap[0]}{cap[1]}",
                    "torch": torch.__version__, "torch_cuda": torch.version.cuda})
    log(f"deep_gemm {payload['version']} ({os.path.dirname(dg.__file__)}), torch {torch.__version__} "
        f"(CUDA {torch.version.cuda}), {payload['device']} {payload['capability']}")
    write_json(args.out, payload)
    log("DeepGEMM runtime init (get_num_sms: cuBLASLt handle; JIT runtime: device, nvcc, cache dir)")
    try:
        payload["num_sms"] = dg.get_num_sms()
        log(f"DeepGEMM runtime up: {payload['num_sms']} SMs")
    except Exception as e:  # noqa: BLE001
        payload["error"] = f"DeepGEMM runtime init failed: {type(e).__name__}: {e}"
        log(payload["error"])
        write_json(args.out, payload)
        sys.exit(1)
    if cap[0] != 9:
        log(f"note: this script follows the sm90 recipe (FP32 scales); device is {payload['capability']}")

    jobs = args.jobs if args.jobs is not None else (0 if args.smoke else min(8, max(1, (os.cpu_count() or 2) // 2)))
    crashed = {}
    if jobs > 0 and len(shapes) > 1:
        payload["warm"] = warm_up(args, shapes, jobs, args.warm_budget_s)
        crashed = {int(k): v for k, v in payload["warm"]["crashed"].items()}
        write_json(args.out, payload)

    for i, s in enumerate(shapes):
        if args.budget_s > 0 and time.time() - t0 > args.budget_s:
            log(f"budget of {args.budget_s:.0f} s spent: {len(shapes) - i} shapes not run")
            payload["not_run"] = [describe(x) for x in shapes[i:]]
            break
        log(describe(s))
        if i in crashed:
            row = base_row(s)
            row["error"] = "skipped: " + crashed[i]
        else:
            try:
                row = RUN[s["kind"]](dg, cast, s, warm=False)
            except Exception as e:  # noqa: BLE001
                row = base_row(s)
                row["error"] = f"{type(e).__name__}: {e}"
        payload["rows"].append(row)
        log(summary_line(row))
        write_json(args.out, payload)
    payload["seconds"] = round(time.time() - t0, 1)
    write_json(args.out, payload)
    failed = sum("error" in r for r in payload["rows"])
    log(f"deepgemm_anchor: {len(payload['rows']) - failed} rows measured, {failed} failed, {payload['seconds']} s")


if __name__ == "__main__":
    main()
