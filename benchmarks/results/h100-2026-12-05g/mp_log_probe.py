# Where the engine core's start-up log lines go under vLLM's CUDA build.
# tests/test_generation_parity.py's multiprocess script runs three times on
# the tiny checkpoint: output to a file, output to a pipe (as the test reads
# it), and to a pipe with VLLM_LOGGING_LEVEL=DEBUG. For each it prints
# whether the tokens came, how many "(EngineCore" lines there are before the
# shutdown lines, and whether the plugin's "registered" line is there.
#   python3 mp_log_probe.py OUTDIR        (from the repository root)
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path[:0] = ["tests", "src"]

from test_generation_parity import ENGINE_SCRIPT, MAX_TOKENS  # noqa: E402

from vllm_spark2_5_plugin.tools.tiny_checkpoint import make_tiny_checkpoint  # noqa: E402

MARK = "vllm-spark2_5-plugin: registered"


def summary(name: str, text: str, out: Path) -> None:
    (out / f"mp-{name}.log").write_text(text)
    lines = text.splitlines()
    core = [ln for ln in lines if ln.startswith("(EngineCore")]
    start = [ln for ln in core if "[shutdown]" not in ln]
    print(
        name,
        json.dumps(
            {
                "tokens": any(ln.startswith("TOKENS=") for ln in lines),
                "engine_core_lines": len(core),
                "engine_core_startup_lines": len(start),
                "registered": sum(MARK in ln for ln in lines),
            }
        ),
        flush=True,
    )


def main(outdir: str) -> None:
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    path = make_tiny_checkpoint(Path("/tmp/mp-probe/tiny"))
    args = [
        sys.executable, "-c", ENGINE_SCRIPT, str(path), json.dumps([[5, 6, 7, 8]]),
        json.dumps({"enforce_eager": True}), str(MAX_TOKENS),
    ]  # fmt: skip
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "1"}
    with open(out / "mp-file.raw", "w") as f:
        subprocess.run(args, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=300)
    summary("file", (out / "mp-file.raw").read_text(), out)
    (out / "mp-file.raw").unlink()
    for name, extra in (("pipe", {}), ("pipe-debug", {"VLLM_LOGGING_LEVEL": "DEBUG"})):
        r = subprocess.run(
            args, env={**env, **extra}, capture_output=True, text=True, timeout=300
        )
        summary(name, r.stdout + r.stderr, out)


if __name__ == "__main__":
    main(sys.argv[1])
