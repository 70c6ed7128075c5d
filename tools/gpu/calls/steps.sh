# Step builders for the call scripts (sourced): each prints one "name|command" step of device_call.sh's EXTRA_GPU0
# list (steps joined by ";\n"). The commands run on the GPU machine, from the repository root, with $b the folder
# of the unpacked binaries and $OUT the results folder.

# bin_ab_step NAME "BIN_A BIN_B" REPEATS "V4_DECODE_ARGS" [ENV_PREFIX]: a BIN A/B of two v4_decode builds
# (decode_switch_ab.sh, its table and logits-digest lines), ENV_PREFIX (e.g. DEEPINFER_KV_FORMAT=fp8) set for every run.
bin_ab_step() {
  printf '%s|%sOUT=$OUT/%s bash tools/gpu/decode_switch_ab.sh $b BIN "%s" %s %s' "$1" "${5:+$5 }" "$1" "$2" "$3" "$4"
}
