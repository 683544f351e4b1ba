# Tenth session's GPU work after the vLLM install (run by h200_background.sh).
set -x
date -u
python3 -c "import torch, triton, vllm; print(torch.__version__, triton.__version__, vllm.__version__)"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
python3 -c "import torch; from vllm_spark2_5_plugin import ops; print('gluon_supported', ops.gluon_supported(torch.device('cuda')))"
mkdir -p $OUT/kern $OUT/vllm
# 1. The Gluon kernel's GPU tests (merged loader changes, 128-row policy), beside the draft's training (timing matters for neither).
( timeout 560 python3 -m pytest -q -rf -k "not overlap" tests/test_fixed_history_gluon.py > $OUT/kern/gluon-tests.log 2>&1; echo "gluon tests rc $?" >> $OUT/kern/gluon-tests.log
  timeout 300 python3 -m pytest -q -rf -k "cuda and (gluon or persistent)" tests/test_fixed_history_attention.py > $OUT/kern/launch-tests.log 2>&1; echo "launch tests rc $?" >> $OUT/kern/launch-tests.log ) &
tests=$!
STAGE_TIMEOUT=420 OUT=$OUT/vllm bash benchmarks/run_h200.sh small-train
date -u
wait $tests
tail -n 4 $OUT/kern/gluon-tests.log $OUT/kern/launch-tests.log | cut -c1-300
date -u
# 2. The Gluon route inside vLLM: 500 requests, 1525 in / 2000 out, trained draft (the 2026-12-01 Triton figures: 2,236 tokens/step, sample_tokens 4.41 ms).
prof() {  # label, extra env
  env $2 timeout 420 python3 benchmarks/profile_decode.py /tmp/small-dspark --dspark --concurrency 500 --input-len 1525 --output-len 2000 \
    --phases offline --label $1 --out $OUT/vllm --log-dir /tmp/profile-logs-$1 > $OUT/vllm/$1.log 2>&1; echo "$1 rc $?"
  grep -o '"tokens": [0-9.]*\|"busy_ms_per_step": [0-9.]*\|"busy_ms_per_step_by_phase": {[^}]*}\|"output_tok_per_s": [0-9.]*\|"name": "fixed_history[a-z_]*", "ms_per_step": [0-9.]*, "calls_per_step": [0-9.]*' $OUT/vllm/$1.log | head -12
}
prof c500-gluon SPARK2_5_GLUON=1
date -u
# 3. The five shapes, kernel only, final policy.
timeout 300 python3 benchmarks/bench_fixed_history_attention.py --kernel-only --md $OUT/kern/five-shapes.md > $OUT/kern/five-shapes.log 2>&1; echo "five rc $?"
grep -E "^\|" $OUT/kern/five-shapes.log | cut -c1-200
date -u
# 4. The same vLLM run with the Gluon kernel off (Triton kernel): the A/B on one machine.
prof c500-triton SPARK2_5_GLUON=0
date -u; echo SESSION DONE
