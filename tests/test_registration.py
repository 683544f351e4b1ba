# SPDX-License-Identifier: Apache-2.0
"""register() through vLLM's real plugin loader, each case in a fresh process."""

import ast

import pytest
from vllm_helpers import run_python

SUCCESS = "vllm-spark2_5-plugin: registered Spark2_5ForCausalLM -> "

# Configure vLLM's logging first (vLLM does it later in the main process, so the
# plugin's INFO line would otherwise only show in engine and worker processes),
# then let vLLM load its general plugins exactly as EngineArgs does.
LOAD = """
from vllm.config.logging import LoggingConfig
from vllm.logger import configure_logging
configure_logging(LoggingConfig())
{before}
from vllm.plugins import load_general_plugins
load_general_plugins()
from vllm import ModelRegistry
from vllm.tool_parsers import ToolParserManager
from vllm.transformers_utils.config import _CONFIG_REGISTRY
def where(arch):
    m = ModelRegistry.models.get(arch)
    return None if m is None else getattr(m, "module_name", "?")
print("TARGET", where("Spark2_5ForCausalLM"))
print("DRAFT", where("Spark2_5DSparkForCausalLM"))
print("CONFIG", "spark2_5" in _CONFIG_REGISTRY)
print("CONFIG_CLASS", getattr(_CONFIG_REGISTRY.get("spark2_5"), "__module__", None))
print("PARSER", ToolParserManager.lazy_parsers.get("spark25", (None,))[0])
{after}
"""


def load(env=None, before="", after=""):
    result = run_python(LOAD.format(before=before, after=after), env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = dict(
        line.split(" ", 1) for line in result.stdout.splitlines() if " " in line
    )
    return lines, result.stdout + result.stderr


def test_entry_point_registers_everything_lazily_and_logs_once():
    lines, log = load(
        after="""
import sys
ours = sorted(m for m in sys.modules if m.startswith("vllm_spark2_5_plugin."))
print("IMPORTED", ours)
import vllm_spark2_5_plugin
vllm_spark2_5_plugin.register()  # idempotent: no second registration, no second line
"""
    )
    assert lines["TARGET"] == "vllm_spark2_5_plugin.models.spark2_5"
    assert lines["DRAFT"] == "vllm_spark2_5_plugin.models.spark2_5_dspark"
    assert lines["CONFIG"] == "True"
    assert lines["PARSER"] == "vllm_spark2_5_plugin.tool_parsers.spark25"
    # Plugin load imports configuration code only: no model, draft, kernel or
    # parser module (those load lazily, in the processes that need them).
    imported = set(ast.literal_eval(lines["IMPORTED"]))
    heavy = {
        "vllm_spark2_5_plugin.models.spark2_5",
        "vllm_spark2_5_plugin.models.spark2_5_dspark",
        "vllm_spark2_5_plugin.ops.fixed_history",
        "vllm_spark2_5_plugin.tool_parsers.spark25",
    }
    assert "vllm_spark2_5_plugin.configs.spark2_5" in imported
    assert not imported & heavy
    assert log.count(SUCCESS) == 1
    assert "tested with vLLM 0.32.0, running vLLM 0.32.0" in log
    assert "tested with vLLM 0.32.0 but running" not in log


def test_front_end_says_the_line_once_when_its_engine_config_is_built(
    tiny_checkpoint,
):
    # The front end's order (LLM, vllm serve): EngineArgs loads the plugins
    # before vLLM configures logging, so the line waits for the engine config.
    # An engine core forked from here (the CUDA build) inherits the plugin's
    # state and does not register again: this is then the only line.
    result = run_python(
        f"""
from vllm.engine.arg_utils import EngineArgs
args = EngineArgs(model={str(tiny_checkpoint)!r}, dtype="float32",
                  max_model_len=256, skip_tokenizer_init=True)
print("BEFORE_CONFIG", flush=True)
args.create_engine_config()
import vllm_spark2_5_plugin
vllm_spark2_5_plugin.register()
args.create_engine_config()  # a second engine in the process: no second line
"""
    )
    assert result.returncode == 0, result.stderr[-3000:]
    log = result.stdout + result.stderr
    assert log.count(SUCCESS) == 1, log[-3000:]
    assert "running vLLM 0.32.0" in log


def test_importing_the_package_imports_neither_torch_nor_vllm():
    result = run_python(
        "import sys, vllm_spark2_5_plugin as p\n"
        "print(p.TESTED_VLLM, 'torch' in sys.modules, 'vllm' in sys.modules)"
    )
    assert result.stdout.split() == ["0.32.0", "False", "False"]


@pytest.mark.parametrize(
    ("allowlist", "loaded"),
    [("spark2_5", True), ("other,spark2_5", True), ("spark25", False), ("", False)],
)
def test_vllm_plugins_allowlist_matches_the_entry_point_name(allowlist, loaded):
    lines, log = load(env={"VLLM_PLUGINS": allowlist})
    assert (lines["TARGET"] == "vllm_spark2_5_plugin.models.spark2_5") is loaded
    assert (lines["CONFIG"] == "True") is loaded
    assert (SUCCESS in log) is loaded


IN_TREE = """
from transformers import LlamaConfig
from vllm import ModelRegistry
from vllm.tool_parsers import ToolParserManager
from vllm.transformers_utils.config import _CONFIG_REGISTRY
# Pretend this vLLM ships Spark2_5 itself: target, draft, config class, and a
# tool parser that was already imported (cached as a resolved class).
ModelRegistry.register_model(
    "Spark2_5ForCausalLM", "vllm.model_executor.models.llama:LlamaForCausalLM"
)
ModelRegistry.register_model(
    "Spark2_5DSparkForCausalLM",
    "vllm.model_executor.models.qwen3_dspark:Qwen3DSparkModel",
)
_CONFIG_REGISTRY["spark2_5"] = LlamaConfig
ToolParserManager.register_lazy_module(
    "spark25", "vllm.tool_parsers.glm47_moe_tool_parser", "Glm47MoeModelToolParser"
)
ToolParserManager.get_tool_parser("spark25")
"""
# The class a server would get for --tool-call-parser spark25.
RESOLVE = (
    'print("PARSER_CLASS", ToolParserManager.get_tool_parser("spark25").__module__)'
)


def test_stands_down_when_vllm_already_provides_the_model():
    lines, log = load(
        before=IN_TREE, after=RESOLVE, env={"SPARK2_5_PLUGIN_OVERRIDE": "0"}
    )
    assert lines["TARGET"] == "vllm.model_executor.models.llama"
    assert lines["DRAFT"] == "vllm.model_executor.models.qwen3_dspark"
    assert lines["CONFIG_CLASS"] == "transformers.models.llama.configuration_llama"
    assert lines["PARSER"] == "vllm.tool_parsers.glm47_moe_tool_parser"
    assert lines["PARSER_CLASS"] == "vllm.tool_parsers.glm47_moe_tool_parser"
    assert "already provides Spark2_5ForCausalLM" in log
    assert "SPARK2_5_PLUGIN_OVERRIDE=1" in log
    assert SUCCESS not in log


def test_override_makes_the_plugin_model_draft_and_parser_win():
    lines, log = load(
        before=IN_TREE, after=RESOLVE, env={"SPARK2_5_PLUGIN_OVERRIDE": "1"}
    )
    assert lines["TARGET"] == "vllm_spark2_5_plugin.models.spark2_5"
    assert lines["DRAFT"] == "vllm_spark2_5_plugin.models.spark2_5_dspark"
    assert lines["CONFIG_CLASS"] == "vllm_spark2_5_plugin.configs.spark2_5"
    assert lines["PARSER"] == "vllm_spark2_5_plugin.tool_parsers.spark25"
    # The glm47 class that was already resolved no longer shadows ours.
    assert lines["PARSER_CLASS"] == "vllm_spark2_5_plugin.tool_parsers.spark25"
    assert SUCCESS in log and "[override]" in log


def test_register_never_raises_and_says_what_failed():
    lines, log = load(
        before="""
from vllm import ModelRegistry
def broken(*args, **kwargs):
    raise RuntimeError("registry exploded")
ModelRegistry.register_model = broken
""",
        after="print('STILL_RUNNING yes')",
    )
    assert lines["STILL_RUNNING"] == "yes"
    assert "registration failed" in log and "registry exploded" in log
    assert SUCCESS not in log


def test_warns_when_running_vllm_differs_from_tested():
    lines, log = load(before="import vllm; vllm.__version__ = '0.33.1'")
    assert lines["TARGET"] == "vllm_spark2_5_plugin.models.spark2_5"
    assert "tested with vLLM 0.32.0 but running vLLM 0.33.1" in log


def test_a_newer_vllm_that_moved_an_internal_fails_in_one_message():
    lines, log = load(
        before="""
import vllm
vllm.__version__ = '0.33.1'
from vllm.config.speculative import SpeculativeConfig
del SpeculativeConfig.update_arch_  # as if a release renamed it
""",
        after="print('STILL_RUNNING yes')",
    )
    assert lines["STILL_RUNNING"] == "yes"
    assert lines["TARGET"] == "None"  # nothing half-registered
    failures = [line for line in log.splitlines() if "registration failed" in line]
    assert len(failures) == 1, failures  # one error line; vLLM carries on
    assert "speculative_update_arch" in log and "update_arch_" in log
    assert "differs from the one the plugin was written for in 1 place" in log


def test_after_a_failed_registration_a_checkpoint_is_refused_naming_the_plugin(
    tiny_checkpoint,
):
    """vLLM's last word was Transformers' "does not recognize this
    architecture ... pip install --upgrade transformers", which cannot help;
    the plugin's error was screens above it."""
    lines, log = load(
        before="""
import vllm
vllm.__version__ = '0.33.1'
from vllm.config.speculative import SpeculativeConfig
del SpeculativeConfig.update_arch_
""",
        after=f"""
from vllm.engine.arg_utils import EngineArgs
try:
    EngineArgs(model={str(tiny_checkpoint)!r}, max_model_len=128).create_engine_config()
except Exception as error:
    print("REFUSED", " ".join(str(error).split()))
SpeculativeConfig.update_arch_ = lambda self: None
vllm.__version__ = '0.32.0'
import vllm_spark2_5_plugin
vllm_spark2_5_plugin.register()
print("RETRIED", _CONFIG_REGISTRY["spark2_5"].__module__)
""",
    )
    refused = lines["REFUSED"]
    # A later attempt that succeeds (the internal back) replaces the stand-in.
    assert lines["RETRIED"] == "vllm_spark2_5_plugin.configs.spark2_5", log[-3000:]
    assert (
        "vllm-spark2_5-plugin could not register with this vLLM (0.33.1), so it "
        "cannot load Spark2_5 checkpoints: VllmSeamError: " in refused
    )
    assert "Install vllm==0.32.0" in refused
    assert "upgrade transformers" not in refused


@pytest.mark.parametrize("trust_remote_code", [False, True])
@pytest.mark.parametrize("with_auto_map", [False, True])
def test_config_loads_without_remote_code(
    tiny_checkpoint, tmp_path, trust_remote_code, with_auto_map
):
    import json
    import shutil

    ckpt = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoint, ckpt)
    if with_auto_map:
        # A checkpoint pointing at code we must never import or execute.
        raw = json.loads((ckpt / "config.json").read_text())
        raw["auto_map"] = {"AutoConfig": "configuration_spark.Spark2_5Config"}
        (ckpt / "config.json").write_text(json.dumps(raw))
        (ckpt / "configuration_spark.py").write_text(
            "raise SystemExit('remote code was executed')\n"
        )
    result = run_python(
        f"""
from vllm.engine.arg_utils import EngineArgs
cfg = EngineArgs(model={str(ckpt)!r}, trust_remote_code={trust_remote_code},
                 skip_tokenizer_init=True).create_model_config()
print("ARCH", cfg.architecture)
print("CLASS", type(cfg.hf_config).__module__ + "." + type(cfg.hf_config).__name__)
print("PP", cfg.registry.is_pp_supported_model(cfg.architectures, cfg))
""",
        env={"HF_HUB_OFFLINE": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ARCH Spark2_5ForCausalLM" in result.stdout
    assert "CLASS vllm_spark2_5_plugin.configs.spark2_5.Spark2_5Config" in result.stdout
    assert "PP True" in result.stdout
