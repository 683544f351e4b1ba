"""vLLM general plugin that adds Spark2_5 models to an unmodified vLLM 0.32.0.

vLLM calls :func:`register` through the ``vllm.general_plugins`` entry point
``spark2_5`` in every process it starts (API server, engine core, workers and
the short-lived model-inspection subprocess). Importing this package therefore
imports neither vLLM nor torch: everything is registered by lazy
``"module:Class"`` strings and vLLM is imported inside :func:`register` only.
"""

from __future__ import annotations

import os

__all__ = ["TESTED_VLLM", "register"]

__version__ = "0.1.0"

#: The vLLM release this plugin was written and tested against.
TESTED_VLLM = "0.32.0"

PLUGIN_NAME = "vllm-spark2_5-plugin"
MODEL_TYPE = "spark2_5"
TARGET_ARCH = "Spark2_5ForCausalLM"
DRAFT_ARCH = "Spark2_5DSparkForCausalLM"
TOOL_PARSER_NAME = "spark25"
OVERRIDE_ENV = "SPARK2_5_PLUGIN_OVERRIDE"

_TARGET_CLASS = f"{__name__}.models.spark2_5:{TARGET_ARCH}"
_DRAFT_CLASS = f"{__name__}.models.spark2_5_dspark:{DRAFT_ARCH}"
_TOOL_PARSER = (f"{__name__}.tool_parsers.spark25", "Spark25ToolParser")

_registered = False


def _logger():
    # Under the "vllm." namespace so vLLM's handler prints our INFO lines.
    from vllm.logger import init_logger

    return init_logger("vllm.spark2_5_plugin")


def _override_requested() -> bool:
    return os.environ.get(OVERRIDE_ENV, "").strip().lower() in ("1", "true", "yes")


def _is_ours(module_name: str) -> bool:
    return module_name == __name__ or module_name.startswith(__name__ + ".")


def _foreign_model(arch: str) -> str | None:
    """Return where ``arch`` comes from if something other than us registered it."""
    from vllm import ModelRegistry

    existing = ModelRegistry.models.get(arch)
    if existing is None:
        return None
    module = getattr(existing, "module_name", None)
    if module is None:  # an eagerly registered class
        module = getattr(getattr(existing, "model_cls", None), "__module__", "?")
    return None if _is_ours(module) else module


def _foreign_tool_parser(name: str) -> str | None:
    from vllm.tool_parsers import ToolParserManager

    if name in ToolParserManager.tool_parsers:
        module = ToolParserManager.tool_parsers[name].__module__
    elif name in ToolParserManager.lazy_parsers:
        module = ToolParserManager.lazy_parsers[name][0]
    else:
        return None
    return None if _is_ours(module) else module


def _register_config(override: bool) -> None:
    from transformers import AutoConfig
    from vllm.transformers_utils.config import _CONFIG_REGISTRY

    from vllm_spark2_5_plugin.configs.spark2_5 import Spark2_5Config

    existing = _CONFIG_REGISTRY.get(MODEL_TYPE)
    if existing is not None and existing is not Spark2_5Config and not override:
        return
    # vLLM's own registry makes vLLM build the config without remote code, even
    # when the checkpoint has an auto_map and --trust-remote-code is given;
    # AutoConfig covers the tokenizer/processor paths that go through
    # Transformers directly.
    _CONFIG_REGISTRY[MODEL_TYPE] = Spark2_5Config
    AutoConfig.register(MODEL_TYPE, Spark2_5Config, exist_ok=True)


def _register() -> None:
    import vllm
    from packaging.version import InvalidVersion, Version
    from vllm import ModelRegistry

    log = _logger()
    override = _override_requested()

    in_tree = _foreign_model(TARGET_ARCH)
    if in_tree is not None and not override:
        log.info(
            "%s: vLLM %s already provides %s (%s); standing down and leaving it "
            "active. Set %s=1 to use the plugin's model, draft and tool parser "
            "instead.",
            PLUGIN_NAME,
            vllm.__version__,
            TARGET_ARCH,
            in_tree,
            OVERRIDE_ENV,
        )
        return

    ModelRegistry.register_model(TARGET_ARCH, _TARGET_CLASS)
    if override or _foreign_model(DRAFT_ARCH) is None:
        ModelRegistry.register_model(DRAFT_ARCH, _DRAFT_CLASS)
    from vllm_spark2_5_plugin.configs.dspark import install_speculative_config_hook

    install_speculative_config_hook()
    _register_config(override)

    from vllm.tool_parsers import ToolParserManager

    if override and TOOL_PARSER_NAME in ToolParserManager.tool_parsers:
        # A resolved parser is cached eagerly and would shadow a lazy entry.
        del ToolParserManager.tool_parsers[TOOL_PARSER_NAME]
    if override or _foreign_tool_parser(TOOL_PARSER_NAME) is None:
        ToolParserManager.register_lazy_module(TOOL_PARSER_NAME, *_TOOL_PARSER)

    log.info(
        "%s: registered %s -> %s (tested with vLLM %s, running vLLM %s)%s",
        PLUGIN_NAME,
        TARGET_ARCH,
        _TARGET_CLASS,
        TESTED_VLLM,
        vllm.__version__,
        " [override]" if in_tree is not None else "",
    )
    try:
        running = Version(vllm.__version__).public
    except InvalidVersion:
        running = vllm.__version__
    if running != TESTED_VLLM:
        log.warning(
            "%s: tested with vLLM %s but running vLLM %s; if loading fails, install "
            "vllm==%s or a plugin release made for your vLLM.",
            PLUGIN_NAME,
            TESTED_VLLM,
            vllm.__version__,
            TESTED_VLLM,
        )


def register() -> None:
    """Entry point ``vllm.general_plugins: spark2_5``.

    Idempotent and cheap; never raises, because vLLM does not catch exceptions
    from plugin functions and start-up of every process would fail.
    """
    global _registered
    if _registered:
        return
    try:
        _register()
        _registered = True
    except Exception:  # noqa: BLE001 - a plugin must not take vLLM down
        try:
            _logger().exception(
                "%s: registration failed; Spark2_5 models will not be available. "
                "Check that vllm==%s is installed in this environment.",
                PLUGIN_NAME,
                TESTED_VLLM,
            )
        except Exception:  # vLLM itself is unusable: fall back to stdlib logging
            import logging

            logging.getLogger(__name__).exception(
                "%s: registration failed", PLUGIN_NAME
            )
