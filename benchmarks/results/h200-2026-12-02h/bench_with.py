# The benchmark script with options added to the Gluon pipeline that the
# launch picks (its _gluon_pipeline), to time a candidate policy without
# changing the package:
#   PYTHONPATH=/tmp/t371:src python3 bench_with.py '{"prefetch_q": true}' ARGS...
import json
import runpy
import sys

sys.path[:0] = ["benchmarks", "src"]

from vllm_spark2_5_plugin.ops import fixed_history_launch as launch  # noqa: E402

extra = json.loads(sys.argv[1])
pipeline = launch._gluon_pipeline


def with_extra(*args, **kwargs):
    return {**pipeline(*args, **kwargs), **extra}


launch._gluon_pipeline = with_extra
sys.argv = ["bench_fixed_history_attention.py", *sys.argv[2:]]
runpy.run_path("benchmarks/bench_fixed_history_attention.py", run_name="__main__")
