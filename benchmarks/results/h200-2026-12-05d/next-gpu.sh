# Prepared on the CPU in the fortieth session (2026-12-05, no device lent);
# for a later lease on a bare H200 with vLLM 0.32.0's Triton 3.7.1 wheel
# in /tmp/t371 (steps `part twNN` x 4 and `wheel` of h200-2026-12-04d).
#   bash next-gpu.sh STEP   (from the repository root; output in $OUT)
export PYTHONPATH=/tmp/t371:src PYTHONUNBUFFERED=1
D=benchmarks/results/h200-2026-12-05d
case $1 in
part|wheel)
  bash benchmarks/results/h200-2026-12-04d/next-gpu.sh "$@" ;;
bytes)  # fp8 shape 4 through the launch's module and through two copies of
  # it with e4m3 weights made without MUFU (bytes.patch; _BYTES 1: clamp
  # by max and a byte truncation, 2: cvt.pack.sat), alternating, two
  # rounds; each checked against the float32 reference first
  cp src/vllm_spark2_5_plugin/ops/fixed_history_gluon.py /tmp/bytes_gluon.py
  patch -s /tmp/bytes_gluon.py $D/bytes.patch || exit 3
  for v in 1 2; do
    sed "s/^_BYTES = gl.constexpr(1)/_BYTES = gl.constexpr($v)/" \
      /tmp/bytes_gluon.py > /tmp/bytes${v}_gluon.py
  done
  V='{},{"module":"/tmp/bytes2_gluon.py"},{"module":"/tmp/bytes1_gluon.py"}'
  timeout 300 python3 benchmarks/results/h200-2026-12-04f/turns_probe.py 3 \
    "[$V,$V]" 2>&1 | grep -v Warn | cut -c1-220 | tee $OUT/bytes.txt ;;
esac
