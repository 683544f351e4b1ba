# Leases of the thirtieth session (2026-12-04), bare H200s with vLLM
# 0.32.0's Triton 3.7.1 wheel in /tmp/t371 (carried in four parts,
# .gpu-vllm/tw00..tw03, joined by the step `wheel`). fp8 shape 4 (32
# requests x 4 KV heads x 4096 keys, 128-row tiles, one program per SM).
#   bash next-gpu.sh STEP   (from the repository root; output in $OUT)
export PYTHONPATH=/tmp/t371:src PYTHONUNBUFFERED=1
P=benchmarks/results/h200-2026-12-04b/packed_probe.py
D=benchmarks/results/h200-2026-12-04d
case $1 in
part)  # one part of the wheel into /tmp/tw
  mkdir -p /tmp/tw && cp .gpu-vllm/$2/* /tmp/tw/ && ls -la /tmp/tw ;;
wheel)  # the parts joined, checked and unpacked into /tmp/t371
  cat /tmp/tw/tw00 /tmp/tw/tw01 /tmp/tw/tw02 /tmp/tw/tw03 > /tmp/tw/triton-3.7.1-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl
  (cd /tmp/tw && sha256sum -c sha) && python3 -m pip install -q --no-deps \
    --target /tmp/t371 /tmp/tw/triton-3.7.1-*.whl && python3 -c \
    "import triton, torch; print('triton', triton.__version__, 'torch', torch.__version__, torch.cuda.get_device_name())" ;;
turns)  # the two multiplying partitions taking turns at the tensor cores
  # (pingpong without overlap: P V of tile t and S of tile t + 1 as one
  # batch, float32 scores, no narrow tail) at register splits where the
  # loader keeps 88-96 registers, against the launch's pipeline and the
  # float32 default loop without the narrow tail; alternating, two rounds
  F='"packed_softmax":false,"narrow_tail":false'
  T="$F,\"pingpong\":true"
  V1="{},{$F,\"mma_regs\":200},{$T,\"mma_regs\":208,\"worker_regs\":96},{$T,\"mma_regs\":200,\"worker_regs\":96},{$T,\"mma_regs\":216,\"worker_regs\":88},{$T,\"mma_regs\":208,\"worker_regs\":96,\"ring\":3}"
  timeout 400 python3 $P 3 fp8 "[$V1,$V1]" graph 2>&1 | cut -c1-300 | tee $OUT/turns.txt ;;
joint)  # one TMA copy per page for K and V together (joint.patch, switched
  # on by PROBE_JOINT=1 at import; the 128-row pipeline only): the launch's
  # pipeline in alternating processes with and without it, the loader at
  # 112 and 120 registers
  V='[{},{"worker_regs":120},{}]'
  for i in 1 2; do
    timeout 150 python3 $P 3 fp8 "$V" graph 2>&1 | cut -c1-200 | grep -v "^shape"
    PROBE_JOINT=1 timeout 150 python3 $P 3 fp8 "$V" graph 2>&1 | cut -c1-200 | grep -v "^shape" | sed 's/^/joint /'
  done | tee $OUT/joint.txt ;;
joint2)  # the joint copies' unpacking read back 8 bytes per thread and row
  # (PROBE_JOINT_NARROW=1, its V stores one wavefront each) and in quarter
  # tiles (PROBE_JOINT_PARTS=4), the loader at 120 registers, alternating
  # with the launch's pipeline
  V='[{"worker_regs":120},{"worker_regs":120}]'
  for i in 1 2; do
    timeout 100 python3 $P 3 fp8 '[{},{}]' graph 2>&1 | cut -c1-200 | grep -v "^shape"
    for e in "PROBE_JOINT_PARTS=2" "PROBE_JOINT_NARROW=1" "PROBE_JOINT_NARROW=1 PROBE_JOINT_PARTS=4"; do
      env PROBE_JOINT=1 $e timeout 100 python3 $P 3 fp8 "$V" graph 2>&1 | cut -c1-200 | grep -v "^shape" | sed "s/^/$e /"
    done
  done | tee $OUT/joint2.txt ;;
vt)  # the fp8 MMAs reading V kept transposed per 16-key page
  # (vt_pages_probe.py: O = P V against P.float() @ V.float())
  timeout 200 python3 $D/vt_pages_probe.py 2>&1 | grep -v Warn | tail -20 | tee $OUT/vt.txt ;;
vtkernel)  # (vt.patch) the 128-row pipeline with fp8 P V whose V tiles
  # come by TMA straight into the ring as pages ([D, 16] bytes each,
  # PROBE_VT=1; the cache is not laid out so, so only the times mean
  # something), against the launch's pipeline and fp8 P V with the loader
  # transposing V (its control), rings of 2-4; alternating processes
  F='"fp8_pv":true,"packed_softmax":false,"narrow_tail":false'
  V="{$F},{$F,\"ring\":3},{$F,\"ring\":4}"
  for i in 1 2; do
    timeout 100 python3 $P 3 fp8 "[{},$V]" graph 2>&1 | cut -c1-160 | grep -v "^shape"
    PROBE_VT=1 timeout 100 python3 $P 3 fp8 "[$V]" graph 2>&1 | cut -c1-160 | grep -v "^shape" | sed "s/^/vt /"
  done | tee $OUT/vtkernel.txt ;;
vtcheck)  # (vt.patch) the same on a cache rewritten with V^T per page
  # (vt_kernel_probe.py), against the float32 reference: then the outputs
  # mean something; then the launch's pipeline and fp8 P V with the loader
  # transposing V (vtkernel's control, whose JSON went wrong there)
  PROBE_VT=1 timeout 200 python3 $D/vt_kernel_probe.py 3 2>&1 | grep -v Warn | tail -5 | tee $OUT/vtcheck.txt
  F='"fp8_pv":true,"packed_softmax":false,"narrow_tail":false'
  timeout 150 python3 $P 3 fp8 "[{},{$F},{$F,\"ring\":3},{$F,\"ring\":4},{}]" graph 2>&1 | cut -c1-160 | tee -a $OUT/vtcheck.txt ;;
vtpacked)  # (vt.patch and vt-packed.patch) the V^T pages with the softmax
  # on float16 pairs turned into 8-bit weights, rings of 3 and 4, twice,
  # against the float32 scores' weights; then the launch's pipeline
  X='[{"ring":3},{"ring":3,"packed_softmax":true},{"ring":4},{"ring":4,"packed_softmax":true}]'
  for i in 1 2; do
    PROBE_VT=1 timeout 200 python3 $D/vt_kernel_probe.py 3 "$X" 2>&1 | grep -v Warn | grep " us "
  done | tee $OUT/vtpacked.txt
  timeout 100 python3 $P 3 fp8 '[{},{}]' graph 2>&1 | cut -c1-120 | grep " us " | tee -a $OUT/vtpacked.txt ;;
vt64)  # (vt.patch) V^T pages in the 64-row pipeline (fp8 shapes 1 and 3:
  # without the issuing warp, edge_tma, the narrow tail and half_rows,
  # which fp8 P V lacks; a first run with half_rows was refused), rings of
  # 3 and 4, against the launch's pipeline there and fp8 P V with the
  # loader transposing V; `vt64 1`: shape 2 alone (vt64-1.txt)
  O='"issue_warp":false,"edge_tma":false,"half_rows":false'
  X="[{$O},{$O,\"ring\":4}]"
  F="\"fp8_pv\":true,\"packed_softmax\":false,\"narrow_tail\":false,$O"
  for i in ${2:-0 2}; do
    PROBE_VT=1 timeout 200 python3 $D/vt_kernel_probe.py $i "$X" 2>&1 | grep -v Warn | grep -E " us |^shape|rror"
    timeout 150 python3 $P $i fp8 "[{},{$F}]" graph 2>&1 | cut -c1-200 | grep -E " us |rror"
  done | tee $OUT/vt64${2:+-$2}.txt ;;
esac
