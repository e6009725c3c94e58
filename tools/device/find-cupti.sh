# Sourced by the device scripts: exports PRIMUS_CUPTI_LIB (CUPTI for the GPU kernels of a trace) from the CUDA
# toolkit, else from the torch wheel's nvidia packages, unless it is already set.
if [ -z "${PRIMUS_CUPTI_LIB:-}" ]; then
  _cupti=$(ls /usr/local/cuda*/lib64/libcupti.so.13* /usr/local/cuda*/extras/CUPTI/lib64/libcupti.so.13* 2>/dev/null | head -1)
  [ -z "$_cupti" ] && _cupti=$(python3 - <<'PY' 2>/dev/null
import glob, site, os
for d in site.getsitepackages():
    for f in glob.glob(os.path.join(d, "nvidia", "**", "libcupti.so*"), recursive=True):
        print(f); raise SystemExit
PY
)
  [ -n "$_cupti" ] && export PRIMUS_CUPTI_LIB=$_cupti
  unset _cupti
fi
echo "== CUPTI: ${PRIMUS_CUPTI_LIB:-(loader path)}"
