# SPDX-License-Identifier: Apache-2.0
"""Strict weight loading for the Spark2_5 target and its DSpark draft.

vLLM 0.32.0 counts every unquantised linear layer as loaded whether or not the
checkpoint had its tensor, and a fused parameter (``qkv_proj``,
``gate_up_proj``) as loaded once any one of its shards arrived; its weight
loaders silently cut a too-large tensor down to the parameter and stop a
too-small one with a bare ``AssertionError``. So the models check the
checkpoint themselves, with public APIs only (``WeightsMapper``, the
parameters, the checkpoint's own files):

* ``target_tensors`` / ``draft_tensors``
  (:mod:`~vllm_spark2_5_plugin.models.checkpoint_tables`) list every checkpoint
  tensor the model reads and its FULL shape, derived from ``config.json`` (the
  layout of ``docs/model.md`` and ``docs/dspark.md``). Every tensor-parallel rank
  receives the whole checkpoint tensor and vLLM cuts the rank's slice out of it
  only inside the weight loader, so the full shape is the right one on every
  rank and the local (sliced, vocabulary-padded) parameter shape never enters.
* :class:`WeightCheck` sits between the checkpoint stream and
  ``AutoWeightsLoader``: a listed tensor with another shape raises before any
  weight loader sees it; after the stream, each parameter of this rank must
  have received EVERY tensor mapped onto it (all of q/k/v, both gate/up) and
  must be in the loader's loaded set, unless it is listed in
  :func:`target_parameters_not_from_checkpoint` (a tied LM head) or
  :func:`classifier_head` (a head vLLM fills itself), the places that name
  parameters that do not come from the checkpoint; and then hold no NaN
  or infinity (:func:`count_nonfinite`).
* :class:`CheckpointFiles` tells which file held a tensor, from the
  checkpoint's ``*.index.json`` weight map (or its single file); it is read
  only when an error is being reported.

Quantised models (an FP8 or other quantised checkpoint, or online
``--quantization``) get the checks that hold whatever the method: vLLM 0.32.0
compares loaded with expected weights only when a model is NOT quantised, and
measured without these checks, an FP8 checkpoint that lacked its LM head, a
weight scale or an output gate served NaN logprobs and token 0 without a
word. A quantisation method renames and reshapes the linear layers' tensors
(``qweight``, ``weight_scale``, packed shapes), so here every tensor of the
tables must be present under its module (``...k_proj.`` holds something),
the shards fused into one parameter must carry the same tensors (a
``weight_scale`` for ``gate_proj`` needs one for ``up_proj``), every
parameter must be loaded except those a checkpoint cannot carry (as vLLM's
own rule for quantised models: KV-cache scales, online quantisation's
parameters, empty placeholders), and no parameter may hold NaN or infinity.
A tensor under a table's name stored as 16- or 32-bit floats, FP8 or int8
codes keeps its shape in every format, so it is shape-checked as well; codes
for a layer the quantization leaves out, and a bias with values the model
has no parameter for, are refused (GPTQ exports carry zero biases, which
pass). The models carry ``quant_config`` so that vLLM's loader applies the
method's own name mappings (KV-cache scales, GPTQ's ``g_idx``) on every
pipeline stage.

KV-cache scales named as older llm-compressor releases wrote them
(``self_attn.k_proj.output_scale`` / ``v_proj.output_scale``: compressed-tensors
then quantised the cache as the output of ``k_proj`` / ``v_proj``) load where
the quantization method maps that name onto the attention layer, as in
vLLM's in-tree models (:func:`kv_cache_scales_by_the_method` renames them
before the q/k/v fusion turns them into ``qkv_proj.output_scale``). vLLM
0.32.0's compressed-tensors method no longer maps them (its in-tree Llama
stops on them too), so :meth:`WeightCheck.check` refuses them in one line
naming the tensor and the fix; vLLM's loader stopped with "'QKVParallelLinear'
object has no attribute 'data'".
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from vllm.model_executor.layers.attention import Attention
from vllm.model_executor.models.utils import WeightsMapper

from vllm_spark2_5_plugin import vllm_seam
from vllm_spark2_5_plugin.models.checkpoint_tables import (
    Expected,
    classifier_head_tensor,
    defaults_note,
)
from vllm_spark2_5_plugin.names import DRAFT_WEIGHT_PREFIXES

INDEX_FILES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
SINGLE_FILES = ("model.safetensors", "pytorch_model.bin")
#: Missing tensors listed in one error (a wrong checkpoint can lack thousands).
MAX_LISTED = 24
#: Values looked at per step for NaN / infinity: bounds the temporary mask
#: of a count (16 MiB), so a vocabulary-sized embedding is never copied whole.
FINITE_CHUNK = 1 << 24
#: 8-bit floats: (mask, value) of the bits of their NaN (and infinity) codes.
#: e4m3fn has no infinity and one NaN code per sign; e5m2's all-ones exponent
#: holds both. Other 8-bit variants are not looked at.
FP8_NONFINITE_BITS = {
    torch.float8_e4m3fn: (0x7F, 0x7F),
    torch.float8_e5m2: (0x7C, 0x7C),
}
WIDE_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
#: Codes a quantisation method stores in the weight's own shape (FP8, int8):
#: shape-checked like float weights. Packed codes (4-bit pairs in uint8,
#: int32 words) take the method's shapes.
SHAPE_KEEPING_CODES = (torch.float8_e4m3fn, torch.float8_e5m2, torch.int8)
#: Tensors a checkpoint may carry for some fused shards only: the KV-cache
#: scales of k_proj / v_proj (``output_scale``, ``k_scale``...), which vLLM
#: maps onto the attention layer, and biases (checked by name instead).
UNSHARED_LEAVES = frozenset(
    {"output_scale", "k_scale", "v_scale", "q_scale", "prob_scale", "kv_scale", "bias"}
)
#: Parameters a quantisation method builds from its config, never read from
#: a checkpoint (vLLM's own loaded-weights rule exempts the same).
CONFIG_BUILT_LEAVES = frozenset({"input_scale_ub"})
#: Tensor names only a quantised checkpoint holds, for the hint that its
#: ``quantization_config`` is missing.
QUANTISED_LEAVES = frozenset(
    {
        "weight_scale",
        "weight_scale_inv",
        "weight_scale_2",
        "input_scale",
        "weight_packed",
        "weight_zero_point",
        "weight_global_scale",
        "input_global_scale",
        "qweight",
        "qzeros",
        "scales",
        "g_idx",
    }
)
#: A KV-cache (or query) scale in the layout of older llm-compressor releases:
#: the output scale of ``k_proj`` / ``v_proj`` (``q_proj``).
PROJECTION_OUTPUT_SCALE = re.compile(r"\.self_attn\.([qkv])_proj\.output_scale$")
#: Its name in the layout current llm-compressor writes.
ATTENTION_SCALE = r".self_attn.\1_scale"
NO_QUANTIZATION_CONFIG = (
    "a quantised checkpoint needs its quantization_config in config.json, "
    "which this one lacks"
)


def count_nonfinite(tensor: torch.Tensor) -> int:
    """How many values of ``tensor`` are NaN or infinite.

    First the smallest and largest values, which are NaN or infinite exactly
    when some value is (``aminmax`` propagates NaN): one pass and one sync,
    measured on two CPU cores at 32 GiB/s for bfloat16 where counting runs
    at 0.4. Only a tensor that fails it is counted. 8-bit floats (an FP8
    checkpoint's weights) have no ``aminmax``: their NaN codes are counted
    from the bits.
    """
    if tensor.dtype in FP8_NONFINITE_BITS:
        mask, value = FP8_NONFINITE_BITS[tensor.dtype]
        bits = tensor.detach().reshape(-1).view(torch.uint8)
        return int(
            sum(
                (bits[start : start + FINITE_CHUNK] & mask).eq_(value).sum()
                for start in range(0, bits.numel(), FINITE_CHUNK)
            )
        )
    if tensor.dtype not in WIDE_FLOATS:
        return 0  # another 8-bit or complex float: not a checkpoint weight here
    flat = tensor.detach().reshape(-1)
    chunks = [
        flat[start : start + FINITE_CHUNK]
        for start in range(0, flat.numel(), FINITE_CHUNK)
    ]
    if not chunks:
        return 0
    ends = torch.stack([torch.stack(torch.aminmax(chunk)) for chunk in chunks])
    if bool(torch.isfinite(ends).all()):
        return 0
    return int(sum(torch.isfinite(chunk).logical_not_().sum() for chunk in chunks))


# ---------------------------------------------------------------------------
# What the checkpoint must hold
# ---------------------------------------------------------------------------


def target_parameters_not_from_checkpoint(config: Any) -> dict[str, str]:
    """Target parameters that are not read from the checkpoint, and why.

    (A tied LM head is the embedding's own parameter object, so vLLM never
    lists it separately; it is named here so that the rule is explicit.)
    """
    if config.tie_word_embeddings:
        return {"lm_head.weight": "tied to model.embed_tokens.weight"}
    return {}


def classifier_head(model: nn.Module) -> tuple[dict[str, Expected], dict[str, str]]:
    """The tensors and not-from-checkpoint parameters of the ``score`` head
    that vLLM's ``--convert classify`` adapter (``as_seq_cls_model``) adds to
    ``model``; none for any other model.

    The head is read from the checkpoint as ``score.weight`` (``num_labels``
    rows), unless ``classifier_from_token`` or ``method`` is set: then vLLM
    converts online (a reranker scored from two tokens' logits) and fills the
    head from the LM head's rows after ``load_weights`` has returned.
    """
    score = getattr(model, "score", None)
    weight = getattr(score, "weight", None)
    if not isinstance(score, nn.Module) or not isinstance(weight, torch.Tensor):
        return {}, {}
    config = model.config
    if getattr(config, "classifier_from_token", None) is not None or (
        getattr(config, "method", None) is not None
    ):
        return {}, {
            "score.weight": "filled from the LM head's rows by vLLM's online "
            "classify conversion after loading"
        }
    return {"score.weight": classifier_head_tensor(config, weight.shape[0])}, {}


def unlisted_target_tensor(config: Any) -> Callable[[str], str | None]:
    """Why a checkpoint tensor the target's table does not list is refused,
    where the reason is a ``config.json`` field (or ``None``: the draft's
    tensors, and names vLLM itself refuses, "no module or parameter named").

    A ``.bias`` must be caught here: vLLM's loaders skip a bias the model has
    no parameter for, so a checkpoint whose ``attention_bias`` is wrong would
    serve without its biases.
    """

    def why(name: str) -> str | None:
        if name.startswith(DRAFT_WEIGHT_PREFIXES):
            return None
        parts = name.split(".")
        if parts[:2] == ["model", "layers"] and len(parts) > 2 and parts[2].isdigit():
            layer = int(parts[2])
            if layer >= config.num_hidden_layers:
                return (
                    f"belongs to layer {layer}, but config.json gives "
                    f"num_hidden_layers = {config.num_hidden_layers}"
                )
            if (
                parts[3:5] == ["self_attn", "g_proj"]
                and not config.attention_output_gate
            ):
                return (
                    "is an output gate, but config.json gives "
                    "attention_output_gate = false"
                )
        if name.endswith(".bias"):
            return (
                "is a bias for which the model that config.json describes has "
                "no parameter (q/k/v biases need attention_bias: true; no other "
                "layer has one); vLLM would drop it without a word"
            )
        if parts[-1] in QUANTISED_LEAVES:
            return f"is a quantisation tensor: {NO_QUANTIZATION_CONFIG}"
        return None

    return why


def kv_cache_scale_name(name: str, quant_config: Any) -> str | None:
    """``name``, or for ``self_attn.{q,k,v}_proj.output_scale`` its name under
    the quantization method's own cache-scale mapping where it has one for
    that name (vLLM 0.32.0's ``fp8`` and ``quark`` methods: onto
    ``self_attn.attn.k_scale`` ...); ``None`` where the method drops it.

    vLLM applies that mapping itself, but after the model's mapper has fused
    ``k_proj`` into ``qkv_proj`` (its stacked renames come first), so the
    method never saw the name; an in-tree model (Llama) maps at the top level
    and its layers fuse later. Names the method leaves alone pass unchanged
    (:meth:`WeightCheck.check` refuses them unless the layer has an
    ``output_scale`` of its own).
    """
    if quant_config is None or not PROJECTION_OUTPUT_SCALE.search(name):
        return name
    return quant_config.get_cache_scale_mapper().map_name(name)


def kv_cache_scales_by_the_method(
    weights: Iterable[tuple[str, torch.Tensor]], quant_config: Any
) -> Iterator[tuple[str, torch.Tensor]]:
    """``weights`` with each name through :func:`kv_cache_scale_name`."""
    for name, tensor in weights:
        mapped = kv_cache_scale_name(name, quant_config)
        if mapped is not None:
            yield mapped, tensor


# ---------------------------------------------------------------------------
# Where a tensor came from
# ---------------------------------------------------------------------------


class CheckpointFiles:
    """The files of a checkpoint directory (or of a repo in the local HF cache)."""

    def __init__(
        self, model: str, revision: str | None = None, cache_dir: str | None = None
    ) -> None:
        self.model = str(model)
        self.revision = revision
        self.cache_dir = cache_dir
        self._read = False
        self._weight_map: dict[str, str] = {}
        self._files: list[str] = []

    def _directory(self) -> Path | None:
        if Path(self.model).is_dir():
            return Path(self.model)
        try:  # a Hub id: look in the local cache only, never download
            from huggingface_hub import try_to_load_from_cache

            for name in (*INDEX_FILES, *SINGLE_FILES):
                found = try_to_load_from_cache(
                    self.model, name, cache_dir=self.cache_dir, revision=self.revision
                )
                if isinstance(found, str):
                    return Path(found).parent
        except Exception:  # noqa: BLE001 - the file name is a courtesy
            return None
        return None

    def _read_once(self) -> None:
        if self._read:
            return
        self._read = True
        directory = self._directory()
        if directory is None:
            return
        for index in INDEX_FILES:
            if (directory / index).is_file():
                try:
                    raw = json.loads((directory / index).read_text())
                    self._weight_map = dict(raw["weight_map"])
                except (OSError, ValueError, KeyError, TypeError):
                    return
                self._files = sorted(set(self._weight_map.values()))
                return
        self._files = [f for f in SINGLE_FILES if (directory / f).is_file()][:1]

    def file_of(self, name: str) -> str | None:
        """The file holding ``name``, when it can be told."""
        self._read_once()
        if name in self._weight_map:
            return self._weight_map[name]
        return self._files[0] if len(self._files) == 1 else None

    def describe(self) -> str:
        """``<checkpoint> (<its weight files>)``."""
        self._read_once()
        if not self._files:
            return self.model
        return f"{self.model} ({', '.join(self._files)})"


@dataclass
class LoadPolicy:
    """What a model's ``load_weights`` checks, fixed when the model is built."""

    checkpoint: CheckpointFiles
    #: Unquantised: checkpoint names and shapes are those of the tables above.
    #: Otherwise (quantised) only what every method keeps is checked.
    check: bool
    #: Every parameter must come from the next load.
    require_all: bool
    #: Only the first load must be whole: later calls (weight updates) may
    #: carry a subset of the tensors.
    first_load_only: bool = True

    @property
    def quantised(self) -> bool:
        return not self.check

    @classmethod
    def from_config(cls, vllm_config: Any, model_config: Any) -> LoadPolicy:
        """The target's policy; ``model_config`` names the checkpoint."""
        load_config = vllm_config.load_config
        check = vllm_config.quant_config is None
        return cls(
            checkpoint=CheckpointFiles(
                model_config.model,
                getattr(model_config, "revision", None),
                getattr(load_config, "download_dir", None),
            ),
            check=check,
            # Dummy weights are random; updates then bring any subset.
            require_all=str(load_config.load_format).lower() != "dummy",
        )


# ---------------------------------------------------------------------------
# The check
# ---------------------------------------------------------------------------


class WeightCheck:
    """Shape-checks a weight stream and then demands every parameter's tensors.

    ``expected`` is keyed by the names the stream carries; ``shown`` turns one
    into the checkpoint's own name for messages (the draft strips a prefix);
    ``mapper`` is the model's checkpoint -> parameter mapping.
    """

    def __init__(
        self,
        model: nn.Module,
        expected: Mapping[str, Expected],
        *,
        policy: LoadPolicy,
        mapper: WeightsMapper,
        not_from_checkpoint: Mapping[str, str] | None = None,
        shown: Callable[[str], str] = lambda name: name,
        hints: Mapping[str, str] | None = None,
        unlisted: Callable[[str], str | None] | None = None,
    ) -> None:
        self.model = model
        self.owner = type(model).__name__
        self.expected = expected
        self.policy = policy
        self.mapper = mapper
        self.not_from_checkpoint = not_from_checkpoint or {}
        self.shown = shown
        self.hints = hints or {}
        #: Why a tensor missing from ``expected`` must not be passed on (or
        #: ``None``): for names vLLM's loaders would drop without a word.
        self.unlisted = unlisted
        #: Listed tensors this load carried (after their checks).
        self.seen: set[str] = set()
        #: Every tensor name this load carried (a quantised model's names).
        self.streamed: set[str] = set()
        self._modules: dict[str, nn.Module] | None = None
        #: A weight update: the tensors come from the caller, not the checkpoint.
        self.updating = not policy.require_all

    def check(self, name: str, tensor: torch.Tensor, shown: str | None = None) -> None:
        """Raise unless a listed tensor has its expected shape and dtype and
        comes once, or an unlisted one is of no concern; note it as seen."""
        quantised = self.policy.quantised
        self.streamed.add(name)
        shown = shown or self.shown(name)
        if PROJECTION_OUTPUT_SCALE.search(name):
            self._check_projection_output_scale(name, shown)
        expected = self.expected.get(name)
        if expected is None:
            # A quantised checkpoint has names of its own, and GPTQ exports
            # carry a zero bias for every linear layer, which vLLM skips; a
            # bias with values is refused as in an unquantised checkpoint.
            why = None if self.unlisted is None else self.unlisted(name)
            if quantised and not (name.endswith(".bias") and tensor.any()):
                why = None
            if why is not None:
                raise ValueError(self._tensor_error(shown, why))
            return
        if not tensor.is_floating_point() or tensor.dtype in FP8_NONFINITE_BITS:
            if quantised and self._quantised_layer(name) is not False:
                if tensor.dtype not in SHAPE_KEEPING_CODES:
                    return  # packed codes (4-bit in uint8): the method's shape
            else:
                # A float parameter would take the codes' values as numbers,
                # unscaled.
                raise ValueError(
                    self._tensor_error(
                        shown,
                        f"has dtype {tensor.dtype}; "
                        + (
                            "its layer is not quantised (the quantization_config "
                            "leaves it out), so it needs 16- or 32-bit "
                            "floating-point weights"
                            if quantised
                            else "an unquantised checkpoint holds 16- or 32-bit "
                            f"floating-point weights ({NO_QUANTIZATION_CONFIG})"
                        ),
                    )
                )
        found = tuple(tensor.shape)
        if found != expected.shape:
            raise ValueError(self._shape_error(shown, found, expected))
        if name in self.seen:
            # The loaders would keep whichever copy came last, without a word.
            raise ValueError(
                self._tensor_error(
                    shown,
                    "comes twice in one update; send one copy"
                    if self.updating
                    else "is stored more than once (in two files, or twice in one); "
                    "keep one copy",
                )
            )
        self.seen.add(name)

    def _module_of(self, name: str) -> nn.Module | None:
        """The module of this rank that checkpoint tensor ``name`` loads
        into (``None``: another pipeline stage's, or a dropped tensor)."""
        if self._modules is None:
            self._modules = dict(self.model.named_modules())
        mapped = self.mapper.map_name(name)
        return self._modules.get(mapped.rpartition(".")[0]) if mapped else None

    def _quant_config(self) -> Any:
        """The quantization config vLLM's loader finds on the model (on it
        or a direct child, as ``AutoWeightsLoader`` looks)."""
        for module in (self.model, *self.model.children()):
            if getattr(module, "quant_config", None) is not None:
                return module.quant_config
        return None

    def _check_projection_output_scale(self, name: str, shown: str) -> None:
        """Refuse ``self_attn.k_proj.output_scale`` (older llm-compressor's
        KV-cache scale) where it would reach the fused ``qkv_proj``, which
        has no ``output_scale`` (a scheme quantising the linear layers'
        outputs gives it one): vLLM's loader then stopped with
        "'QKVParallelLinear' object has no attribute 'data'". A method that
        maps the name renamed it before this check
        (:func:`kv_cache_scale_name`)."""
        module = self._module_of(name)
        if module is None or isinstance(
            getattr(module, "output_scale", None), torch.Tensor
        ):
            return
        new = PROJECTION_OUTPUT_SCALE.sub(ATTENTION_SCALE, shown)
        kind = "query" if new.endswith(".q_scale") else "KV-cache"
        quant_config = self._quant_config()
        if quant_config is None:
            fix = (
                "a checkpoint without quantization_config has no use for it: "
                "remove these tensors, or add the quantization_config (with "
                "its kv_cache_scheme) of the tool that wrote them"
            )
        else:
            fix = (
                f"vLLM 0.32.0's {quant_config.get_name()} method no longer "
                "maps that name onto the attention layer (its in-tree models "
                "fail on it too). Re-quantise the model with a current "
                "llm-compressor (which writes self_attn.k_scale / "
                "self_attn.v_scale), or rename every "
                "self_attn.{q,k,v}_proj.output_scale tensor to "
                f"self_attn.{{q,k,v}}_scale (this one to {new!r})"
            )
        raise ValueError(
            self._tensor_error(
                shown,
                f"is a {kind} scale in the layout of older llm-compressor "
                "releases, which vLLM's loader would stop on with "
                "\"'QKVParallelLinear' object has no attribute 'data'\": "
                f"{fix}",
            )
        )

    def _quantised_layer(self, name: str) -> bool | None:
        """Whether the module that checkpoint tensor ``name`` loads into has
        a quantisation method (an ``ignore``d layer of a quantised model, a
        norm or an unquantised embedding has none); ``None`` where this rank
        has no such module (a layer of another pipeline stage, whose tensors
        the loader skips)."""
        module = self._module_of(name)
        if module is None:
            return None
        method = getattr(module, "quant_method", None)
        return method is not None and not type(method).__name__.startswith(
            "Unquantized"
        )

    def watch(
        self, weights: Iterable[tuple[str, torch.Tensor]]
    ) -> Iterator[tuple[str, torch.Tensor]]:
        """``weights``, each checked before it is passed on to the loaders."""
        for name, tensor in weights:
            self.check(name, tensor)
            yield name, tensor

    def _tensor_error(self, name: str, what: str) -> str:
        """``<model> cannot load the checkpoint <path>: tensor '<name>' (file
        <file>) <what>``, or, for a weight update (a load after the first, or
        after dummy weights), ``<model> cannot take the weight update: ...``."""
        if self.updating:
            return f"{self.owner} cannot take the weight update: tensor {name!r} {what}"
        file = self.policy.checkpoint.file_of(name)
        where = f" (file {file})" if file else ""
        return (
            f"{self.owner} cannot load the checkpoint "
            f"{self.policy.checkpoint.model}: tensor {name!r}{where} {what}"
        )

    def _shape_error(
        self, name: str, found: tuple[int, ...], expected: Expected
    ) -> str:
        why = [
            f"{field} = {want}, the tensor has {got}"
            for field, want, got in zip(
                expected.fields, expected.shape, found, strict=False
            )
            if want != got
        ]
        if len(found) != len(expected.shape):
            why = [f"{len(found)} dimensions instead of {len(expected.shape)}"]
        note = defaults_note(
            getattr(self.model, "config", None), expected.differing_fields(found)
        )
        return self._tensor_error(
            name,
            f"has shape {found}, but the model's config gives "
            f"{expected.describe()}: " + "; ".join(why) + note,
        )

    def _sources(self, params: Mapping[str, Any]) -> dict[str, list[str]]:
        """Parameter name -> the checkpoint tensors mapped onto it."""
        sources: dict[str, list[str]] = {}
        for name in self.expected:
            target = self.mapper.map_name(name)
            if target in params:
                sources.setdefault(target, []).append(name)
        return sources

    def missing(self, loaded: set[str]) -> list[str]:
        """One line per checkpoint tensor this rank's parameters still lack."""
        params = dict(self.model.named_parameters())
        sources = self._sources(params)
        lines = []
        for param in params:
            if param in self.not_from_checkpoint:
                continue
            names = sources.get(param)
            if not names:
                lines.append(f"parameter {param!r} (no checkpoint tensor is known)")
                continue
            absent = [n for n in names if n not in self.seen]
            for name in absent:
                line = f"{self.shown(name)!r} of shape {self.expected[name].describe()}"
                if len(names) > 1:
                    line += f", one of the {len(names)} tensors fused into {param!r}"
                if name in self.hints:
                    line += f" ({self.hints[name]})"
                lines.append(line)
            if not absent and param not in loaded:
                lines.append(f"parameter {param!r} (its tensors were not loaded)")
        return lines

    def missing_quantised(self, loaded: set[str]) -> list[str]:
        """One line per tensor or parameter a quantised load lacks (the checks
        every quantisation method keeps; see the module's docstring)."""
        below: dict[str, set[str]] = {}  # module -> the names under it, relative
        for name in self.streamed:
            parts = name.split(".")
            for cut in range(1, len(parts)):
                below.setdefault(".".join(parts[:cut]), set()).add(
                    ".".join(parts[cut:])
                )
        lines = []
        fused: dict[str, list[str]] = {}  # parameter's module -> its shards' modules
        reported: set[str] = set()  # parameters' modules a line above explains
        for name, expected in self.expected.items():
            module, _, leaf = name.rpartition(".")
            mapped = self.mapper.map_name(name)
            target = mapped.rpartition(".")[0] if mapped is not None else None
            if leaf == "weight" and target is not None:
                fused.setdefault(target, []).append(module)
            if leaf == "bias" and name not in self.streamed:
                lines.append(f"{self.shown(name)!r} of shape {expected.describe()}")
            elif leaf != "bias" and module not in below:
                lines.append(
                    f"{self.shown(name)!r} of shape {expected.describe()} (no "
                    f"tensor of {self.shown(module)!r}, quantised or not)"
                )
            else:
                continue
            if target is not None:
                reported.add(target)
        for target, modules in fused.items():
            if len(modules) < 2:
                continue
            carried = {m: below.get(m, set()) for m in modules}
            shared = set().union(*carried.values())
            shared = {t for t in shared if t.rpartition(".")[2] not in UNSHARED_LEAVES}
            for module in modules:
                if module not in below:
                    continue  # reported above, as a whole
                for leaf in sorted(shared - carried[module]):
                    reported.add(target)
                    lines.append(
                        f"{self.shown(f'{module}.{leaf}')!r}, which the other "
                        f"tensors fused into {target!r} have"
                    )
        exempt = self.loaded_by_design()
        for param, _ in self.model.named_parameters():
            if (
                param in loaded
                or param in exempt
                or param in self.not_from_checkpoint
                or param.rpartition(".")[0] in reported
            ):
                continue
            lines.append(f"parameter {param!r} (no checkpoint tensor was loaded)")
        return lines

    def loaded_by_design(self) -> set[str]:
        """Parameters of a quantised model a checkpoint need not carry, as in
        vLLM's own rule for quantised models: the attention layers' KV-cache
        and query scales (1.0 when absent), parameters of online quantisation
        (the weights are quantised while they load), empty placeholders and
        parameters built from the quantisation config."""
        exempt = set()
        for module_name, module in self.model.named_modules():
            method = getattr(module, "quant_method", None)
            whole = vllm_seam.is_kv_cache_scale_method(method) or getattr(
                method, "uses_meta_device", False
            )
            for name, param in module.named_parameters(recurse=False):
                if (
                    whole
                    or param.numel() == 0
                    or name in CONFIG_BUILT_LEAVES
                    or isinstance(module, Attention)
                ):
                    exempt.add(f"{module_name}.{name}" if module_name else name)
        return exempt

    def nonfinite(self) -> list[str]:
        """One line per parameter of this rank holding NaN or infinity."""
        params = dict(self.model.named_parameters())
        sources = self._sources(params)
        lines = []
        for param, value in params.items():
            if (
                param in self.not_from_checkpoint
                or not value.is_floating_point()
                or value.is_meta
            ):
                continue
            bad = count_nonfinite(value)
            if bad:
                names = ", ".join(repr(self.shown(n)) for n in sources.get(param, []))
                where = f", from {names}" if names else ""
                lines.append(
                    f"parameter {param!r} ({bad} of its {value.numel()} values{where})"
                )
        return lines

    def finish(self, loaded: set[str], header: str | None = None) -> None:
        """Raise if a parameter did not get all its tensors from this load,
        or holds NaN or infinity after it."""
        if not self.policy.require_all:
            return
        if self.policy.first_load_only:
            self.policy.require_all = False
        if self.policy.quantised:
            lines = self.missing_quantised(loaded)
        else:
            lines = self.missing(loaded)
        if lines:
            header = header or (
                f"{self.owner}: the checkpoint {self.policy.checkpoint.describe()} "
                f"lacks {len(lines)} tensor(s); every parameter must come from it"
            )
            raise ValueError(f"{header}: " + _listed(lines))
        if lines := self.nonfinite():
            # Measured with a NaN in one k_proj row: the model loaded and
            # answered token 0 with NaN logprobs, no error anywhere.
            raise ValueError(
                f"{self.owner} cannot load the checkpoint "
                f"{self.policy.checkpoint.describe()}: {len(lines)} parameter(s) "
                "hold NaN or infinite values after loading, which make the "
                "model's outputs NaN: "
                + _listed(lines)
                + ". The checkpoint's values are damaged (a diverged training "
                "run, or an overflow when it was converted to a narrower dtype); "
                "export it again from finite weights"
            )


def _listed(lines: list[str]) -> str:
    """``lines`` joined, at most :data:`MAX_LISTED` of them."""
    if len(lines) > MAX_LISTED:
        lines = [*lines[:MAX_LISTED], f"... and {len(lines) - MAX_LISTED} more"]
    return "; ".join(lines)
