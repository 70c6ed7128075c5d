set -uo pipefail
b=/tmp/deepinfer-bin; mkdir -p $b && tar -xf .gpubin/bins.tar.xz -C $b
export DEEPINFER_BF16_GEMV=stream
OUT=$OUT/v4 bash tools/gpu/trace_decode.sh 1 16 > /dev/null 2>&1; echo v4 trace rc=$?
DEEPINFER_V41_SITE_ENTRY=fused DEEPINFER_CSA2_SELECT=bins OUT=$OUT/v41 bash tools/gpu/trace_decode.sh 1 10 --family v41 >/dev/null 2>&1; echo v41 trace rc=$?
DEEPINFER_MOE_SHARED_FIRST=0 $b/v4_decode --quick --pdl off --route-stamps --out $OUT/rs_v4_sa_pdloff.json > $OUT/rs_sa_pdloff.log 2>&1
$b/v4_decode --quick --pdl off --route-stamps --out $OUT/rs_v4_pdloff.json > $OUT/rs_pdloff.log 2>&1
tail -4 $OUT/rs_sa_pdloff.log; tail -4 $OUT/rs_pdloff.log
head -40 $OUT/v4/trace_b1.txt; head -40 $OUT/v41/trace_b1.txt
