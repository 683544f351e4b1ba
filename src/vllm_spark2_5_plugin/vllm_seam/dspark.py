# SPDX-License-Identifier: Apache-2.0
"""vLLM's DSpark heads and the speculator that calls the draft."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING

from vllm_spark2_5_plugin.vllm_seam.hooks import expect as _expect
from vllm_spark2_5_plugin.vllm_seam.hooks import hook_point as _hook_point
from vllm_spark2_5_plugin.vllm_seam.hooks import params as _params

if TYPE_CHECKING:
    from torch import nn


# ---------------------------------------------------------------------------
# vLLM's DSpark heads and the speculator that calls the draft
# ---------------------------------------------------------------------------


def dspark_heads() -> tuple[type, type]:
    """vLLM's ``(DSparkMarkovHead, DSparkConfidenceHead)`` module classes."""
    from vllm.model_executor.models.qwen3_dspark import (
        DSparkConfidenceHead,
        DSparkMarkovHead,
    )

    return DSparkMarkovHead, DSparkConfidenceHead


@_hook_point(
    "qwen3_dspark.DSparkMarkovHead(vocab_size, draft_vocab_size, markov_rank, "
    "prefix, quant_config) with embed/bias, and DSparkConfidenceHead(input_dim, "
    "prefix, bias, with_markov) returning a logit"
)
def _check_dspark_heads() -> None:
    markov, confidence = dspark_heads()
    _expect(
        _params(markov)[:5]
        == ["vocab_size", "draft_vocab_size", "markov_rank", "prefix", "quant_config"],
        f"DSparkMarkovHead{_params(markov)}",
    )
    _expect(callable(markov.embed) and callable(markov.bias), "embed and bias")
    _expect(
        _params(confidence)[:4] == ["input_dim", "prefix", "bias", "with_markov"],
        f"DSparkConfidenceHead{_params(confidence)}",
    )


#: What vLLM's DSpark speculator calls on the draft model (and the draft
#: implements); a rename on vLLM's side would silently bypass our method.
DRAFT_PROTOCOL = (
    "combine_hidden_states",
    "precompute_and_store_context_kv",
    "compute_draft_logits",
    "markov_embed",
    "markov_bias",
    "compute_confidence",
    "map_draft_to_target",
)


@_hook_point("the V2 DSpark/DFlash speculators call the draft's protocol methods")
def _check_dspark_draft_protocol() -> None:
    from vllm.v1.worker.gpu.spec_decode.dflash import speculator as dflash
    from vllm.v1.worker.gpu.spec_decode.dspark import speculator as dspark

    source = inspect.getsource(dflash) + inspect.getsource(dspark)
    for method in DRAFT_PROTOCOL:
        _expect(f".{method}(" in source, f"the speculator calls .{method}(")


@_hook_point(
    "EagleModelMixin.aux_hidden_state_layers holds the aux ids the runner "
    "asked for (id k = the residual stream entering layer k)"
)
def _check_aux_hidden_state_layers() -> None:
    from vllm.model_executor.models.interfaces import EagleModelMixin

    _expect(EagleModelMixin.aux_hidden_state_layers == (), "aux_hidden_state_layers")
    source = inspect.getsource(EagleModelMixin)
    _expect(
        "self.aux_hidden_state_layers = tuple(sorted(set(layers)))" in source,
        "aux ids stored sorted and unique",
    )


# ---------------------------------------------------------------------------
# vLLM's kernels for the draft's layers (the draft is not torch.compile'd)
# ---------------------------------------------------------------------------


def use_platform_kernels(module: nn.Module) -> list[str]:
    """Make the vLLM ``CustomOp`` layers under ``module`` run vLLM's kernels.

    vLLM chooses an op's implementation (``CustomOp._forward_method``) when the
    op is built. With torch.compile on (the default), it chooses the plain
    PyTorch one, since Inductor fuses it into the compiled graph. The DSpark
    draft is not compiled, so its RMSNorms, RoPE and GELU-and-mul would run as
    chains of small unfused kernels; this re-chooses with the op enabled, i.e.
    vLLM's fused kernel for the platform (``forward_cuda`` on NVIDIA GPUs).

    Ops the user turned off by name (``-rms_norm`` in
    ``compilation_config.custom_ops``) keep vLLM's choice. Ops without
    parameters may be shared with the target (``get_rope`` caches its
    instances), so the draft gets its own copy of those instead of changing
    the target's. Returns the registered names of the ops now enabled.
    """
    import copy

    from vllm.config import get_cached_compilation_config
    from vllm.model_executor.custom_op import CustomOp

    custom_ops = get_cached_compilation_config().custom_ops
    enabled: list[str] = []

    def convert(parent: nn.Module) -> None:
        for child_name, child in list(parent.named_children()):
            name = getattr(type(child), "name", None)
            if (
                isinstance(child, CustomOp)
                and name is not None
                and f"-{name}" not in custom_ops
            ):
                if next(child.parameters(), None) is None:
                    # Possibly shared (get_rope): a copy with its own module
                    # and buffer tables, the tensors themselves shared.
                    child = copy.copy(child)
                    child._modules = dict(child._modules)
                    child._buffers = dict(child._buffers)
                    setattr(parent, child_name, child)
                child._enforce_enable = True
                child._forward_method = child.dispatch_forward(compile_native=False)
                enabled.append(name)
            convert(child)

    convert(module)
    return sorted(set(enabled))


@_hook_point(
    "CustomOp.__init__ stores dispatch_forward(compile_native=...) in "
    "_forward_method, which forward calls, and honours _enforce_enable"
)
def _check_custom_op_dispatch() -> None:
    from vllm.model_executor.custom_op import CustomOp

    _expect(
        _params(CustomOp.dispatch_forward) == ["self", "compile_native"],
        f"CustomOp.dispatch_forward{_params(CustomOp.dispatch_forward)}",
    )
    init, forward = (
        inspect.getsource(CustomOp.__init__),
        inspect.getsource(CustomOp.forward),
    )
    _expect("self._enforce_enable" in init, "CustomOp.__init__ sets _enforce_enable")
    _expect(
        "self._forward_method = self.dispatch_forward(" in init,
        "CustomOp.__init__ stores _forward_method",
    )
    _expect("self._forward_method(" in forward, "CustomOp.forward calls it")
    _expect(
        "self._enforce_enable or self.enabled()"
        in inspect.getsource(CustomOp.dispatch_forward),
        "dispatch_forward honours _enforce_enable",
    )
