# Step builders for the call scripts (sourced): each prints one "name|command" step of device_call.sh's EXTRA_GPU0
# list (steps joined by ";\n"). The commands run on the GPU machine, from the repository root, with $b the folder
# of the unpacked binaries and $OUT the results folder.

# bin_ab_step NAME "BIN_A BIN_B" REPEATS "V4_DECODE_ARGS" [ENV_PREFIX]: a BIN A/B of two v4_decode builds
# (decode_switch_ab.sh, its table and logits-digest lines), ENV_PREFIX (e.g. DEEPINFER_KV_FORMAT=fp8) set for every run.
bin_ab_step() {
  printf '%s|%sOUT=$OUT/%s bash tools/gpu/decode_switch_ab.sh $b BIN "%s" %s %s' "$1" "${5:+$5 }" "$1" "$2" "$3" "$4"
}

# select_stamps_step NAME ["ENV"] ["V4_DECODE_ARGS"]: the index select stamps (`v4_decode --quick --pdl on
# --select-stamps`, batch 1) under ENV, their log's `all` / `alone` rows printed.
select_stamps_step() {
  printf "%s|%stimeout 150 \$b/v4_decode --quick --pdl on %s--select-stamps --out \$OUT/%s.json > \$OUT/%s.log 2>&1 || true && grep -E '^ *(all|alone) ' \$OUT/%s.log | cut -c1-330" \
    "$1" "${2:+$2 }" "${3:+$3 }" "$1" "$1" "$1"
}

# bin_ab_models NAME "BIN_A BIN_B ..." [REPEATS [QUICK_REPEATS]]: bin_ab_step on V4 and on V4.1 (steps NAME_v4,
# NAME_v41): batches 1 / 8 and REPEATS (3) repeats, or under QUICK=1 QUICK_REPEATS repeats (default: batch 1 and 2
# repeats).
bin_ab_models() {
  local reps=${3:-3} batches=1,8
  if [ "${QUICK:-0}" = 1 ]; then
    if [ -n "${4:-}" ]; then reps=$4; else reps=2 batches=1; fi
  fi
  bin_ab_step "$1_v4" "$2" "$reps" "--batches $batches"
  printf ';\n'
  bin_ab_step "$1_v41" "$2" "$reps" "--family v41 --batches $batches"
}

# filtered_tests_steps FILTER: test_gpu and test_gpu_model under one gtest filter (steps tests_kernels, tests_model),
# the tests of the kernels a call's patches touch.
filtered_tests_steps() {
  printf "tests_kernels|\$b/test_gpu --gtest_filter='%s';\ntests_model|\$b/test_gpu_model --gtest_filter='%s'" "$1" "$1"
}

# The gtest filter of the decode kernels that sessions 48-51's compiled-not-run patches touch (the stream GEMMs, the
# MoE and routing, attention and its split, the GEMVs, the mHC sites, the compressor / indexer / CSA2 selects, the
# quantizers), for filtered_tests_steps. Run as one step it outlasts device_call.sh's 300 s limit (run 240: the
# GpuFp8Gemm grid sweeps take ~26 s a test): split it over steps when every test must run.
PATCHED_KERNEL_TESTS='GpuFp8Gemm.*:GpuStreamFp4Wgmma.*:GpuMxfp4Experts.*:GpuFp4HalfOverlap.*:GpuMoe.*:GpuRouteSelector.*'
PATCHED_KERNEL_TESTS+=':GpuSinkAttention.*:GpuAttentionPdl.*:GpuKvLists.*:GpuPdl.*:GpuPdlModel.*'
PATCHED_KERNEL_TESTS+=':GpuBf16Gemv.*:GpuW8A16.*:GpuDecodeFused.*:GpuBranchGemvGrid.*:GpuCompressorBranch.*'
PATCHED_KERNEL_TESTS+=':GpuHcSiteSpread.*:GpuMhc.*:GpuHcLaggedSite.*:GpuV41SiteEntry.*:GpuSiteMixBranch.*'
PATCHED_KERNEL_TESTS+=':GpuCompressorIndexer.*:GpuCsa2SelectBins.*:GpuCsa2ScoreShape.*:GpuV41Modules.*:GpuIndexScoreShape.*'
PATCHED_KERNEL_TESTS+=':GpuIndexInputsEarly.*:GpuIndexQueryFirst.*:GpuFp8Quantize.*:GpuQuantPrologue.*:GpuMoeSiteCombine.*'
PATCHED_KERNEL_TESTS+=':GpuHcMixMma.*'

# The gtest filter of the decode index selects (V4's and V4.1's selector and ticket forms, the indexer modules, the
# score shapes), for session 66's calls.
INDEX_SELECT_TESTS='GpuDecodeFused.*:GpuCompressorIndexer.*:GpuCsa2SelectBins.*:GpuCsa2ScoreShape.*'
INDEX_SELECT_TESTS+=':GpuIndexScoreShape.*:GpuV41Modules.*'

# The gtest filter of what session 59's attention numerics patch touches (the norms, RoPE, attention and its query
# prologue, KV rows, PDL chains, the decode fusions, the indexer's query, the V4 / V4.1 forwards and engine against
# the CPU, batch invariance, the MoE / mHC combines), for filtered_tests_steps.
ATTENTION_NUMERICS_TESTS='GpuRmsNorm.*:GpuRope.*:GpuSinkAttention.*:GpuKvRecord*:GpuKvCache.*:GpuKvLists.*:GpuPdl*'
ATTENTION_NUMERICS_TESTS+=':GpuAttentionPdl.*:GpuQNormPrologue.*:GpuQRopeEpilogue.*:GpuDecodeFused.*:GpuMergeEpilogue.*'
ATTENTION_NUMERICS_TESTS+=':V4GpuForward.*:V41GpuForward.*:GpuV41Modules.*:GpuCompressorIndexer.*:GpuIndexQueryFirst.*'
ATTENTION_NUMERICS_TESTS+=':GpuIndexInputsEarly.*:GpuEngine.*:GpuBatchInvariance.*:GpuMoeSiteCombine.*:GpuHcSiteSpread.*'
ATTENTION_NUMERICS_TESTS+=':GpuMhc.*'

# stream_site_tests_steps [MORE]: the tests of the MXFP4 / FP8 stream code landed in 1f69135 that run 240 left unrun
# (GpuStreamFp4Wgmma.*, then MORE, a ':'-led filter, in the same step; four GpuFp8Gemm tests in a step of their own:
# the grid sweeps take ~26 s a test under device_call.sh's 300 s limit) and the mHC site / lagged site / spread / site
# mix / PDL and compressor / CSA2 / KV record / index query / V4.1 module / decode fused tests in both binaries
# (steps tests_stream_fp4, tests_site_kernels, tests_site_model, tests_fp8_gemm).
stream_site_tests_steps() {
  local site='GpuHcLaggedSite.*:GpuV41SiteEntry.*:GpuMhc.*:GpuHcSiteSpread.*:GpuSiteMixBranch.*:GpuPdlModel.*'
  local fp4='GpuCompressor*:GpuCsa2*:GpuKvRecord*:GpuIndexQueryFirst.*:GpuV41Modules.*:GpuDecodeFused.*'
  printf "tests_stream_fp4|\$b/test_gpu --gtest_filter='GpuStreamFp4Wgmma.*%s';\n" "${1:-}"
  printf "tests_site_kernels|\$b/test_gpu --gtest_filter='%s:%s';\n" "$site" "$fp4"
  printf "tests_site_model|\$b/test_gpu_model --gtest_filter='%s:%s';\n" "$site" "$fp4"
  printf "tests_fp8_gemm|\$b/test_gpu --gtest_filter='GpuFp8Gemm.Mid*:GpuFp8Gemm.StreamGridCapBitwise:GpuFp8Gemm.WgmmaPrefillShapes'"
}

# prefill_ab_steps "ROOFLINE_A ROOFLINE_B ..." [ROUNDS (3)]: the prefill grouped GEMM A/B, rounds of alternating
# `--prefill-only --prefill-16k --quick` runs of roofline builds (steps prefill_<build>_<round>, ~4 s each), each
# printing its prefill_v13 rows.
prefill_ab_steps() {
  local i r sep=""
  for i in $(seq 1 "${2:-3}"); do
    for r in $1; do
      printf "%sprefill_%s_%s|\$b/%s --prefill-only --prefill-16k --quick --out \$OUT/prefill_%s_%s.json > \$OUT/prefill_%s_%s.log 2>&1 && grep -E 'prefill_v13 ' \$OUT/prefill_%s_%s.log" \
        "$sep" "$r" "$i" "$r" "$r" "$i" "$r" "$i" "$r" "$i"
      sep=$';\n'
    done
  done
}

# env_rounds_steps NAME ENV "VALUES" ROUNDS "ROOFLINE_ARGS" [TIMEOUT [VALUE_PREFIX]]: an env-switch experiment of one
# roofline build (steps prefill_<NAME><value>_<round>), ROUNDS rounds of each value in turn, each run with
# ENV=<VALUE_PREFIX><value> under `timeout TIMEOUT` (60 s: a switch that stalls the kernel must not hang the call), its
# lines time-stamped into $OUT/<step>.log and its JSON to $OUT/<step>.json (prefill_sustained_table.py's input).
env_rounds_steps() {
  local i v step sep=""
  for i in $(seq 1 "$4"); do
    for v in $3; do
      step="prefill_$1${v}_$i"
      printf '%s%s|%s=%s%s timeout %s bash tools/gpu/stamp_lines.sh $b/roofline %s --out $OUT/%s.json > $OUT/%s.log' \
        "$sep" "$step" "$2" "${7:-}" "$v" "${6:-60}" "$5" "$step" "$step"
      sep=$';\n'
    done
  done
}

# flag_rounds_steps NAME FLAG "VALUES" ROUNDS "ROOFLINE_ARGS": a command-line switch of one roofline build (steps
# prefill_<NAME><value>_<round>, stamped_step each), ROUNDS rounds of each value in turn, each run with
# `ROOFLINE_ARGS FLAG <value>`; the steps joined as EXTRA_GPU0 wants them, without a trailing separator.
flag_rounds_steps() {
  local i v sep=""
  for i in $(seq 1 "$4"); do
    for v in $3; do
      printf '%s%s' "$sep" "$(stamped_step "prefill_$1${v}_$i" roofline "$5 $2 $v")"
      sep=$';\n'
    done
  done
}

# stamped_step NAME BINARY "ARGS": one run of a packed benchmark binary as step NAME, its lines time-stamped
# (tools/gpu/stamp_lines.sh) into $OUT/NAME.log, its JSON to $OUT/NAME.json: to line up with clock_logged's log.
stamped_step() {
  printf '%s|bash tools/gpu/stamp_lines.sh $b/%s %s --out $OUT/%s.json > $OUT/%s.log' "$1" "$2" "$3" "$1" "$1"
}

# fp4_stamps_step NAME "V4_DECODE_ARGS": the MXFP4 experts' in-step stamps of a batch-1 decode step (`v4_decode
# --fp4-stamps`: per product the blocks' start spread, first stage and launch gap) into $OUT/NAME.{json,log}; the step
# prints the summary rows.
fp4_stamps_step() {
  printf '%s|timeout 150 $b/v4_decode --quick --pdl on %s --fp4-stamps --out $OUT/%s.json > $OUT/%s.log 2>&1 || true && grep -E "^ *(all|alone) " $OUT/%s.log | cut -c1-200' "$1" "$2" "$1" "$1" "$1"
}

# stamped_repeats NAME BINARY "ARGS" COUNT: COUNT stamped_steps NAME_1 .. NAME_COUNT of the same run, joined as
# EXTRA_GPU0 wants them.
stamped_repeats() {
  local i sep=""
  for i in $(seq 1 "$4"); do
    printf '%s%s' "$sep" "$(stamped_step "$1_$i" "$2" "$3")"
    sep=$';\n'
  done
}

# head_norm_vectors: torch's reference vectors of V4's per-head query norm (tools/fixtures/make_head_norm_vectors.py,
# CPU and CUDA) into $OUT/head_norm_vectors.safetensors, for HeadNormGolden.TorchCuda (copy the file to
# tests/golden/fixtures/). A call runs it first, so that the vectors come back even if a later step is cut.
# PRINT_ONLY=1: nothing.
head_norm_vectors() {
  [ "${PRINT_ONLY:-0}" = 1 ] && return 0
  local out=${OUT:-$PWD/gpu-out}
  mkdir -p "$out"
  python3 tools/fixtures/make_head_norm_vectors.py --out "$out/head_norm_vectors.safetensors" 2>&1 | tail -3
}

# clock_logged: runs tools/gpu/device_call.sh with tools/gpu/clock_log.sh's loggers beside the whole call (the call's
# $OUT gets clocks.csv and clocks_reasons.csv); returns the call's exit status. PRINT_ONLY=1: prints the call's
# EXTRA_GPU0 steps instead and runs nothing.
clock_logged() {
  local here out rc
  if [ "${PRINT_ONLY:-0}" = 1 ]; then
    printf '%s\n' "${EXTRA_GPU0:-}"
    return 0
  fi
  here=$(dirname "${BASH_SOURCE[0]}")
  out=${OUT:-$PWD/gpu-out}
  bash "$here/../clock_log.sh" start "$out"
  bash "$here/../device_call.sh"
  rc=$?
  bash "$here/../clock_log.sh" stop "$out"
  return $rc
}

# The direct call scripts' pieces (session 69's; run on the GPU machine with $out the results folder):
# call_setup BIN_DIR: sets b=BIN_DIR, unpacks .gpubin/bins.tar.xz there (unless it holds v4_decode already), sets and
# makes out=$OUT (default ./gpu-out).
call_setup() {
  b=$1
  [ -x "$b/v4_decode" ] || { mkdir -p "$b" && tar xJf .gpubin/bins.tar.xz -C "$b"; }
  out=${OUT:-$PWD/gpu-out}
  mkdir -p "$out"
}
# tests_run LOG BIN FILTER: a gtest binary under DEEPINFER_REQUIRE_GPU=1 (timeout 300 s) into $out/LOG, then its
# PASSED / FAILED lines, the failed tests' names and the exact checks that missed.
tests_run() {
  local log=$out/$1
  DEEPINFER_REQUIRE_GPU=1 timeout 300 "$2" --gtest_filter="$3" >"$log" 2>&1
  echo "$1 rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' "$log" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \]' "$log" | head -10
  grep -E '^GPU_CHECK .*mismatches=[1-9]' "$log" | cut -c1-160 | head -10
}

# decode_ab_models BIN_DIR VAR "VALUES" REPS BATCHES: tools/gpu/decode_switch_ab.sh on V4 and V4.1 (logs under
# $out/ab_v4, $out/ab_v41), then each model's medians, logits digests and per-run rows (the copy-roofline column).
decode_ab_models() {
  local fam
  mkdir -p "$out"
  for fam in v4 v41; do
    OUT=$out/ab_$fam bash "$(dirname "${BASH_SOURCE[0]}")/../decode_switch_ab.sh" "$1" "$2" "$3" "$4" --family $fam \
      --batches "$5" >"$out/ab_$fam.log" 2>&1
    echo "== $fam"
    grep -E "median|digest" "$out/ab_$fam.log"
    grep -hE "^4096 +[0-9]+ " "$out"/ab_$fam/ab_$2/*.log | sed "s/^/$fam /"
  done
}

# select_stamps_run NAME BIN FAMILY [ENV=V ...]: the select stamps of one v4_decode build (batch 1, `--select-stamps`)
# under the given environment into $out/stamps_NAME.{log,json}, then its layer rows shortened to the per-block times,
# the ticket and the end.
select_stamps_run() {
  local name=$1 bin=$2 fam=$3
  shift 3
  env "$@" timeout 150 "$bin" --quick --pdl on --family "$fam" --select-stamps --out "$out/stamps_$name.json" \
    >"$out/stamps_$name.log" 2>&1 || echo "stamps $name failed (rc $?)"
  echo "== stamps $name"
  grep -E '^ *(layer|all) ' "$out/stamps_$name.log" |
    sed -E 's/: *score_to_ticket_us ([0-9.]+) score_to_end_us ([0-9.]+).*/: ticket \1 end \2/'
}
