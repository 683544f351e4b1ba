"""The benchmark's five shapes with extra Gluon options in every pipeline
that copies by TMA (a what-if of the launch policy; env EXTRA: a JSON
object)."""

import json
import os
import runpy
import sys

from vllm_spark2_5_plugin.ops import fixed_history_launch as launch

extra = json.loads(os.environ["EXTRA"])
policy = launch._gluon_pipeline


def _with_extra(rows, **kw):
    options = policy(rows, **kw)
    if options.get("tma"):
        options.update(extra)
    return options


launch._gluon_pipeline = _with_extra
sys.argv = ["bench_fixed_history_attention.py", *sys.argv[1:]]
runpy.run_path("benchmarks/bench_fixed_history_attention.py", run_name="__main__")
