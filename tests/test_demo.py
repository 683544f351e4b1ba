# SPDX-License-Identifier: Apache-2.0
"""The README's main job, ``python -m vllm_spark2_5_plugin.tools.demo``: a
tiny random checkpoint generated from by real vLLM in a fresh interpreter,
and bad arguments refused before vLLM starts."""

from __future__ import annotations

import json

import pytest
from vllm_helpers import run_python

from vllm_spark2_5_plugin.tools.demo import main


def test_bad_arguments_are_refused_before_vllm_starts(tmp_path, capsys):
    llama = tmp_path / "llama"
    llama.mkdir()
    (llama / "config.json").write_text(json.dumps({"model_type": "llama"}))
    from vllm_spark2_5_plugin.tools.tiny_checkpoint import make_tiny_checkpoint

    # A Spark2_5 checkpoint with a field that cannot work, and one without a
    # tokenizer: vLLM's tracebacks after (or while) the engine started.
    bad = make_tiny_checkpoint(tmp_path / "bad")
    raw = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**raw, "num_key_value_heads": 3}))
    untokenized = make_tiny_checkpoint(tmp_path / "untokenized")
    for file in untokenized.glob("tokenizer*"):
        file.unlink()
    cases = {
        ("--prompt", ""): "--prompt: give some text",
        ("--model", str(bad)): "bad/config.json: num_attention_heads (4) must be "
        "divisible by num_key_value_heads (3)",
        ("--model", str(untokenized)): "has no tokenizer that can be loaded",
        ("--max-tokens", "0"): "--max-tokens: must be at least 1, got 0",
        ("--model", str(tmp_path / "missing")): "--model: "
        f"{tmp_path / 'missing'} is not a checkpoint directory: no config.json",
        ("--model", str(llama)): "is not a Spark2_5 checkpoint (model_type 'llama'",
    }
    for argv, message in cases.items():
        with pytest.raises(SystemExit):
            main(list(argv))
        assert message in capsys.readouterr().err, argv


@pytest.mark.slow
def test_demo_generates_from_a_tiny_checkpoint_and_cleans_up(tmp_path):
    run = run_python(
        "from vllm_spark2_5_plugin.tools.demo import main; main()",
        # The engine core in its own process, as the README's command runs it.
        env={"TMPDIR": str(tmp_path), "VLLM_ENABLE_V1_MULTIPROCESSING": "1"},
        args=(),
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    # The demo stops its engine itself: left to interpreter exit, vLLM
    # force-killed the engine process, or found it gone, with a warning.
    log = run.stdout + run.stderr
    assert "force killing" not in log and "exited unexpectedly" not in log, log[-3000:]
    lines = run.stdout.splitlines()
    assert "architecture: Spark2_5ForCausalLM" in lines, run.stdout
    # Each call generates 1 to 24 tokens (all 24 unless the random weights
    # pick a stop token).
    counts = {}
    for line in lines:
        for label in ("generate():", "chat():"):
            if line.startswith(label):
                counts[label] = int(line.split()[1])
    assert set(counts) == {"generate():", "chat():"}, run.stdout
    assert all(1 <= n <= 24 for n in counts.values()), counts
    assert not list(tmp_path.glob("spark2_5-*")), "the tiny checkpoint was left"
