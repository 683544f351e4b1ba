# SPDX-License-Identifier: Apache-2.0
"""vLLM general plugin that adds Spark2_5 models to an unmodified vLLM 0.32.0.

vLLM calls :func:`register` through the ``vllm.general_plugins`` entry point
``spark2_5`` in every process it starts (API server, engine core, workers and
the short-lived model-inspection subprocess). Importing this package therefore
imports neither vLLM nor torch: everything is registered by lazy
``"module:Class"`` strings and vLLM is imported inside :func:`register` only.
"""

from __future__ import annotations

import contextlib
import os

from vllm_spark2_5_plugin.names import (
    DRAFT_ARCH,
    MODEL_TYPE,
    OVERRIDE_ENV,
    PLUGIN_NAME,
    TARGET_ARCH,
    TOOL_PARSER_NAME,
)

__all__ = ["TESTED_VLLM", "register"]

#: The one source of the release number: pyproject.toml reads it (statically)
#: through ``[tool.setuptools.dynamic]``. Keep it a plain string literal.
__version__ = "0.2.0"

#: The vLLM release this plugin was written and tested against.
TESTED_VLLM = "0.32.0"

_TARGET_CLASS = f"{__name__}.models.spark2_5:{TARGET_ARCH}"
_DRAFT_CLASS = f"{__name__}.models.spark2_5_dspark:{DRAFT_ARCH}"
_TOOL_PARSER = (f"{__name__}.tool_parsers.spark25", "Spark25ToolParser")

_registered = False
#: INFO lines said before vLLM configured its logging in this process.
_unsaid: list[tuple[str, tuple[object, ...]]] = []


def _logger():
    # Under the "vllm." namespace so vLLM's handler prints our INFO lines.
    from vllm.logger import init_logger

    return init_logger("vllm.spark2_5_plugin")


def _info(msg: str, *args: object) -> None:
    """Log an INFO line now, or when this process builds its engine config.

    vLLM loads plugins in the front-end process (``LLM``, ``vllm serve``)
    before it configures logging there, so a line logged at once would be
    dropped; and an engine core started by fork (the CUDA build's default)
    inherits this module's state and never registers again. Such a line
    waits until ``VllmConfig`` is built, after vLLM's handler exists.
    """
    import logging

    if logging.getLogger("vllm").handlers:
        _logger().info(msg, *args)
        return
    if not _unsaid:
        from vllm_spark2_5_plugin import vllm_seam

        vllm_seam.check_before_vllm_config(_say_unsaid)
    _unsaid.append((msg, args))


def _say_unsaid(_vllm_config: object = None) -> None:
    while _unsaid:
        msg, args = _unsaid.pop(0)
        _logger().info(msg, *args)


def _override_requested() -> bool:
    return os.environ.get(OVERRIDE_ENV, "").strip().lower() in ("1", "true", "yes")


def _foreign(module: str | None) -> str | None:
    """``module`` unless it is one of ours (or nothing is registered)."""
    if module is None or module == __name__ or module.startswith(__name__ + "."):
        return None
    return module


def _running_release() -> str:
    import vllm
    from packaging.version import InvalidVersion, Version

    try:
        return Version(vllm.__version__).public
    except InvalidVersion:
        return vllm.__version__


def _register() -> None:
    import vllm
    from vllm import ModelRegistry
    from vllm.tool_parsers import ToolParserManager

    from vllm_spark2_5_plugin import vllm_seam
    from vllm_spark2_5_plugin.configs.dspark import install_dspark_config_hooks

    log = _logger()
    if _running_release() != TESTED_VLLM:
        log.warning(
            "%s: tested with vLLM %s but running vLLM %s; if loading fails, install "
            "vllm==%s or a plugin release made for your vLLM.",
            PLUGIN_NAME,
            TESTED_VLLM,
            vllm.__version__,
            TESTED_VLLM,
        )
        # One error that names every internal the plugin relies on and this
        # vLLM changed, instead of failures scattered over later steps.
        vllm_seam.require_hook_points()

    override = _override_requested()
    in_tree = _foreign(vllm_seam.registered_model_module(TARGET_ARCH))
    if in_tree is not None and not override:
        _info(
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
    if override or _foreign(vllm_seam.registered_model_module(DRAFT_ARCH)) is None:
        ModelRegistry.register_model(DRAFT_ARCH, _DRAFT_CLASS)
    install_dspark_config_hooks()

    from vllm_spark2_5_plugin.configs.spark2_5 import Spark2_5Config

    existing = vllm_seam.registered_config_class(MODEL_TYPE)
    # (An earlier failed attempt in this process may have left its refusing
    # stand-in, see _refuse_spark2_5_checkpoints.)
    ours = existing is Spark2_5Config or getattr(existing, "unavailable", False)
    if override or existing is None or ours:
        vllm_seam.register_config_class(MODEL_TYPE, Spark2_5Config)

    if override:
        vllm_seam.forget_resolved_tool_parser(TOOL_PARSER_NAME)
    parser_owner = _foreign(vllm_seam.registered_tool_parser_module(TOOL_PARSER_NAME))
    if override or parser_owner is None:
        ToolParserManager.register_lazy_module(TOOL_PARSER_NAME, *_TOOL_PARSER)

    from vllm_spark2_5_plugin.tool_parsers.history import check_spark2_5_history

    vllm_seam.check_chat_messages(check_spark2_5_history)

    _info(
        "%s: registered %s -> %s (tested with vLLM %s, running vLLM %s)%s",
        PLUGIN_NAME,
        TARGET_ARCH,
        _TARGET_CLASS,
        TESTED_VLLM,
        vllm.__version__,
        " [override]" if in_tree is not None else "",
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
    except Exception as error:  # noqa: BLE001 - a plugin must not take vLLM down
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
        # Best effort: the log above says why in any case.
        with contextlib.suppress(Exception):
            _refuse_spark2_5_checkpoints(error)


def _refuse_spark2_5_checkpoints(error: Exception) -> None:
    """After a failed registration, make loading a Spark2_5 checkpoint fail
    naming this plugin's error.

    Without a config class for ``model_type: spark2_5``, vLLM's last word
    (printed twice, after its retry) is Transformers' "does not recognize
    this architecture ... pip install --upgrade transformers", which cannot
    help; the plugin's own error is screens above it. A config class that
    refuses to be built carries the cause into vLLM's error instead. Nothing
    is replaced where another package registered the model type."""
    import vllm
    from transformers import PretrainedConfig

    from vllm_spark2_5_plugin import vllm_seam

    if vllm_seam.registered_config_class(MODEL_TYPE) is not None:
        return
    cause = str(error).strip().splitlines()
    message = (
        f"{PLUGIN_NAME} could not register with this vLLM ({vllm.__version__}), "
        f"so it cannot load Spark2_5 checkpoints: {type(error).__name__}"
        + (f": {cause[0]}" if cause else "")
        + f". Install vllm=={TESTED_VLLM} in this environment, or a plugin "
        "release made for your vLLM; the log above has the whole error"
    )

    class Spark2_5Unavailable(PretrainedConfig):
        model_type = MODEL_TYPE
        unavailable = True

        def __init__(self, **kwargs: object) -> None:
            raise ValueError(message)

        @classmethod
        def from_pretrained(cls, *args: object, **kwargs: object) -> None:
            raise ValueError(message)

    vllm_seam.register_config_class(MODEL_TYPE, Spark2_5Unavailable)
