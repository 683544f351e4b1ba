# SPDX-License-Identifier: Apache-2.0
"""Spark2_5DSparkForCausalLM on CPU against the pure-PyTorch DSpark reference.

vLLM 0.32 cannot run DSpark end to end on CPU (Model Runner V2 needs Triton),
so these tests build the target and the draft the way the worker does --
vLLM's real ``SpeculativeConfig`` (with the plugin's hook), a ``VllmConfig``, a
single-process gloo "distributed" world, ``get_model`` with the default
loader and its strict loaded-weights check, and the same embedding / LM-head
sharing as ``load_dspark_model`` -- and then call the hooks vLLM's
``DSparkSpeculator`` calls, in its order, with a paged KV cache laid out as
vLLM lays it out and a forward context holding per-layer attention metadata.
On CPU the draft's attention runs the PyTorch reference of the fixed-history
kernel; the rest is the production code.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from vllm_helpers import build_dspark_models

from vllm_spark2_5_plugin.names import FULL, SLIDING
from vllm_spark2_5_plugin.references.dspark import DSparkReference
from vllm_spark2_5_plugin.references.layers import attention, causal_mask
from vllm_spark2_5_plugin.references.spark2_5 import Spark2_5Reference

# Models on the CPU and the attention's PyTorch reference: the GPU counterparts
# are the cuda-marked tests of test_dspark_gpu_*.py.
pytestmark = pytest.mark.cpu_build

BLOCK = 4  # TINY_DSPARK's dspark_block_size = num_speculative_tokens
PAGE = 4  # KV-cache block size of the test caches
NUM_PAGES = 24
# float32 vLLM layers (oneDNN GEMMs on CPU) against the float64 reference.
ATOL = 2e-4
HIDDEN_TOL = 1e-3
LOGIT_TOL = 1e-2

CONFIGS = {
    # default tiny draft: one sliding layer, vanilla head, under draft_model.*
    "vanilla-sliding-draft_model": dict(dspark_prefix="draft_model.", dspark=True),
    # rnn head + confidence head, hybrid sliding/full layers, q/k/v biases, mtp.*
    "rnn-confidence-hybrid-mtp": dict(
        dspark_prefix="mtp.",
        dspark={
            "dspark_markov_head_type": "rnn",
            "dspark_enable_confidence_head": True,
            "dspark_layer_types": [SLIDING, FULL],
        },
        attention_bias=True,
    ),
    # full layer first, a narrow draft window, model.mtp.*
    "vanilla-full-sliding-model.mtp": dict(
        dspark_prefix="model.mtp.",
        dspark={"dspark_layer_types": [FULL, SLIDING], "dspark_sliding_window": 5},
    ),
}


@dataclass
class DraftMetadata:
    """The fields of vLLM's FlashAttention/Triton metadata the draft reads."""

    query_start_loc: torch.Tensor
    seq_lens: torch.Tensor
    block_table: torch.Tensor
    slot_mapping: torch.Tensor


@dataclass
class Built:
    path: Path
    vllm_config: object
    spec_config: object
    target: torch.nn.Module
    draft: torch.nn.Module
    ref: DSparkReference


def build(path: Path, max_model_len: int = 256) -> Built:
    """Target and draft of the checkpoint at ``path``, built as the worker
    builds them (the hybrid KV-cache manager on)."""
    vllm_config, spec, target, draft = build_dspark_models(
        path, BLOCK, max_model_len=max_model_len
    )
    ref = DSparkReference.from_checkpoint(path)
    return Built(path, vllm_config, spec, target, draft, ref)


@pytest.fixture(scope="module", params=list(CONFIGS))
def built(request, world, tmp_path_factory) -> Built:
    from vllm_spark2_5_plugin.tools.tiny_checkpoint import make_tiny_checkpoint

    path = make_tiny_checkpoint(
        tmp_path_factory.mktemp(request.param), seed=3, **CONFIGS[request.param]
    )
    return build(path)


# ---------------------------------------------------------------------------
# Helpers: paged caches and metadata as vLLM builds them
# ---------------------------------------------------------------------------


def bind_paged_caches(draft, dtype=torch.float32) -> list[torch.Tensor]:
    """Give every draft layer a zeroed ``[B, nKV, N, 2D]`` cache (LBNHC order);
    ``torch.uint8`` for an fp8 cache, as vLLM allocates one."""
    caches = []
    for layer in draft.model.layers:
        attn = layer.self_attn
        raw = torch.zeros(
            NUM_PAGES, PAGE, attn.num_kv_heads, 2 * attn.head_dim, dtype=dtype
        )
        kv_cache = raw.permute(0, 2, 1, 3)  # logical view, physical block-major
        attn.attn.bind_kv_cache(kv_cache)
        caches.append(kv_cache)
    return caches


def block_tables(context_lens: list[int]) -> torch.Tensor:
    """Scrambled, non-overlapping page ids per request; page 0 is the null page."""
    pages_per_req = math.ceil((max(context_lens) + BLOCK) / PAGE)
    order = torch.randperm(NUM_PAGES - 1, generator=torch.Generator().manual_seed(0))
    table = (order[: pages_per_req * len(context_lens)] + 1).view(
        len(context_lens), pages_per_req
    )
    return table.to(torch.int32)


def slots(table: torch.Tensor, req: int, positions: torch.Tensor) -> torch.Tensor:
    return table[req].long()[positions // PAGE] * PAGE + positions % PAGE


def read_cache(kv_cache, table, req, positions, head_dim):
    k_cache, v_cache = kv_cache.transpose(1, 2).split(head_dim, dim=-1)
    s = slots(table, req, positions)
    return k_cache[s // PAGE, s % PAGE], v_cache[s // PAGE, s % PAGE]


def aux_states(built: Built, length: int, seed: int) -> torch.Tensor:
    h = built.draft.config.hidden_size
    n = len(built.draft.settings.target_layer_ids)
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(length, n * h, generator=gen)


def split_aux(aux: torch.Tensor, n: int) -> list[torch.Tensor]:
    return list(aux.chunk(n, dim=-1))


class DraftStep:
    """One DSpark draft step for several requests, as the speculator runs it."""

    def __init__(
        self,
        built: Built,
        context_lens: list[int],
        seed: int = 0,
        cache_dtype: torch.dtype = torch.float32,
    ):
        self.built = built
        self.draft = built.draft
        self.context_lens = context_lens
        self.caches = bind_paged_caches(self.draft, cache_dtype)
        self.table = block_tables(context_lens)
        n_aux = len(self.draft.settings.target_layer_ids)
        # Per request: its target aux states and combined features c.
        self.aux = [aux_states(built, L, seed + r) for r, L in enumerate(context_lens)]
        self.c_ref = [built.ref.combine(split_aux(a, n_aux)) for a in self.aux]

    def store_context(self, per_layer: bool = True) -> torch.Tensor:
        """combine_hidden_states + precompute_and_store_context_kv on all rows."""
        with torch.inference_mode():
            c = self.draft.combine_hidden_states(torch.cat(self.aux))
        positions = torch.cat([torch.arange(L) for L in self.context_lens])
        context_slots = torch.cat(
            [
                slots(self.table, r, torch.arange(L))
                for r, L in enumerate(self.context_lens)
            ]
        )
        num_layers = len(self.draft.model.layers)
        slot_arg = [context_slots] * num_layers if per_layer else context_slots
        with torch.inference_mode():
            self.draft.precompute_and_store_context_kv(c, positions, slot_arg)
        return c

    def forward(
        self, block_ids: list[list[int]], padding_requests: int = 0
    ) -> torch.Tensor:
        """The block forward under a forward context with per-layer metadata.

        ``padding_requests`` appends requests the way a FULL CUDA graph pads a
        batch: they own query rows but no sequence (``seq_lens`` 0), their
        block-table rows point at the null page and their slots are -1.
        """
        from vllm.forward_context import set_forward_context

        lens = torch.tensor(self.context_lens + [0] * padding_requests)
        num_reqs = len(block_ids) + padding_requests
        qsl = torch.arange(num_reqs + 1, dtype=torch.int32) * BLOCK
        positions = torch.cat(
            [torch.arange(L, L + BLOCK) for L in self.context_lens]
            + [torch.zeros(BLOCK, dtype=torch.long)] * padding_requests
        )
        query_slots = torch.cat(
            [
                slots(self.table, r, torch.arange(L, L + BLOCK))
                for r, L in enumerate(self.context_lens)
            ]
            + [torch.full((BLOCK,), -1, dtype=torch.long)] * padding_requests
        )
        table = torch.cat(
            [self.table, self.table.new_zeros(padding_requests, self.table.shape[1])]
        )
        metadata = DraftMetadata(
            query_start_loc=qsl,
            seq_lens=torch.where(lens > 0, lens + BLOCK, 0).to(torch.int32),
            block_table=table,
            slot_mapping=query_slots,
        )
        names = self.draft.get_draft_kv_cache_layer_names()
        block_ids = block_ids + [[0] * BLOCK] * padding_requests
        ids = torch.tensor([t for blk in block_ids for t in blk], dtype=torch.int32)
        with (
            torch.inference_mode(),
            set_forward_context(
                dict.fromkeys(names, metadata),
                self.built.vllm_config,
                slot_mapping=dict.fromkeys(names, query_slots),
            ),
        ):
            return self.draft(input_ids=ids, positions=positions)

    def block(self, anchor: int) -> list[int]:
        return [anchor] + [self.draft.settings.noise_token_id] * (BLOCK - 1)


# ---------------------------------------------------------------------------
# Weights
# ---------------------------------------------------------------------------


def fresh_draft(built: Built, prefix: str):
    """A new draft instance before vLLM's post-load processing.

    (On CPU vLLM repacks linear weights after loading and empties
    ``.weight``, so the loaded values are checked on an unprocessed twin; a
    distinct prefix keeps its attention layer names unique.)
    """
    from vllm.config import set_current_vllm_config
    from vllm.utils.torch_utils import set_default_torch_dtype

    from vllm_spark2_5_plugin.models.spark2_5_dspark import Spark2_5DSparkForCausalLM

    with (
        set_current_vllm_config(built.vllm_config),
        set_default_torch_dtype(torch.float32),
    ):
        return Spark2_5DSparkForCausalLM(vllm_config=built.vllm_config, prefix=prefix)


def test_weights_from_each_prefix_land_in_the_right_parameters(built: Built):
    tensors = load_file(str(built.path / "model.safetensors"))
    prefix = built.ref.prefix
    draft = fresh_draft(built, "weights")
    # The whole shared checkpoint goes through, as vLLM's loader streams it.
    loaded = draft.load_weights(tensors.items())
    params = dict(draft.named_parameters())
    assert loaded == set(params)

    def ckpt(name):
        return tensors[prefix + name]

    assert torch.equal(params["model.main_proj.weight"], ckpt("main_proj.weight"))
    assert torch.equal(params["model.main_norm.weight"], ckpt("main_norm.weight"))
    assert torch.equal(params["model.norm.weight"], ckpt("norm.weight"))
    for name in ("markov_w1", "markov_w2"):
        assert torch.equal(
            params[f"model.markov_head.{name}.weight"],
            ckpt(f"markov_head.{name}.weight"),
        )
    for j in range(len(draft.model.layers)):
        p = f"layers.{j}."
        qkv = torch.cat([ckpt(p + f"self_attn.{x}_proj.weight") for x in "qkv"])
        assert torch.equal(params[f"model.{p}self_attn.qkv_proj.weight"], qkv)
        if draft.config.attention_bias:
            bias = torch.cat([ckpt(p + f"self_attn.{x}_proj.bias") for x in "qkv"])
            assert torch.equal(params[f"model.{p}self_attn.qkv_proj.bias"], bias)
        gate_up = torch.cat(
            [ckpt(p + "mlp.gate_proj.weight"), ckpt(p + "mlp.up_proj.weight")]
        )
        assert torch.equal(params[f"model.{p}mlp.gate_up_proj.weight"], gate_up)
        for name in (
            "self_attn.g_proj.weight",
            "self_attn.o_proj.weight",
            "mlp.down_proj.weight",
            "input_layernorm.weight",
            "post_attention_layernorm.weight",
        ):
            assert torch.equal(params[f"model.{p}{name}"], ckpt(p + name)), name
    settings = built.draft.settings
    if settings.markov_head_type == "rnn":
        assert torch.equal(
            params["model.markov_head.rnn_proj.weight"],
            ckpt("markov_head.rnn_proj.weight"),
        )
    if settings.enable_confidence_head:
        for name in ("weight", "bias"):
            assert torch.equal(
                params[f"model.confidence_head.proj.{name}"],
                ckpt(f"confidence_head.proj.{name}"),
            )
    else:
        assert draft.model.confidence_head is None
    # Target embedding and LM head are the target's own modules, not copies.
    assert built.draft.model.embed_tokens is built.target.model.embed_tokens
    assert built.draft.lm_head is built.target.lm_head


def test_draft_attention_layers_are_named_after_the_target_layers(built: Built):
    num_target = built.spec_config.target_model_config.get_total_num_hidden_layers()
    names = built.draft.get_draft_kv_cache_layer_names()
    assert names == [
        f"model.layers.{num_target + j}.self_attn.attn"
        for j in range(len(built.draft.model.layers))
    ]
    assert built.draft.get_draft_attn_causal() == [False] * len(names)
    static = built.vllm_config.compilation_config.static_forward_context
    assert all(
        static[name] is layer.self_attn.attn
        for name, layer in zip(names, built.draft.model.layers, strict=True)
    )


def test_missing_or_mixed_draft_weights_are_reported(built: Built):
    tensors = load_file(str(built.path / "model.safetensors"))
    prefix = built.ref.prefix
    draft = fresh_draft(built, "strict")
    partial = {n: t for n, t in tensors.items() if n != prefix + "main_norm.weight"}
    with pytest.raises(ValueError, match=r"lacks DSpark draft weights .*main_norm"):
        draft.load_weights(partial.items())
    other = "mtp." if prefix != "mtp." else "draft_model."
    mixed = {**tensors, other + "norm.weight": tensors[prefix + "norm.weight"]}
    with pytest.raises(ValueError, match="several prefixes"):
        draft.load_weights(mixed.items())
    stray = {
        **tensors,
        prefix + "layers.7.mlp.up_proj.weight": tensors[prefix + "norm.weight"],
    }
    with pytest.raises(ValueError, match=r"layers\.7.*no matching parameter"):
        draft.load_weights(stray.items())


# ---------------------------------------------------------------------------
# Math against the reference
# ---------------------------------------------------------------------------


def test_combine_hidden_states_matches_reference(built: Built):
    aux = aux_states(built, 9, seed=11)
    n = len(built.draft.settings.target_layer_ids)
    with torch.inference_mode():
        got = built.draft.combine_hidden_states(aux)
    want = built.ref.combine(split_aux(aux, n))
    torch.testing.assert_close(got.double(), want, atol=ATOL, rtol=ATOL)


@pytest.mark.parametrize(
    "per_layer", [True, False], ids=["per-layer-slots", "shared-slots"]
)
def test_context_kv_lands_in_each_layers_paged_cache(built: Built, per_layer):
    step = DraftStep(built, context_lens=[6, 19])
    step.store_context(per_layer=per_layer)
    for j, kv_cache in enumerate(step.caches):
        head_dim = built.draft.model.layers[j].self_attn.head_dim
        for r, L in enumerate(step.context_lens):
            positions = torch.arange(L)
            k, v = read_cache(kv_cache, step.table, r, positions, head_dim)
            want_k, want_v = built.ref.context_kv(j, step.c_ref[r], positions)
            torch.testing.assert_close(k.double(), want_k, atol=ATOL, rtol=ATOL)
            torch.testing.assert_close(v.double(), want_v, atol=ATOL, rtol=ATOL)
        # The null page and unused pages stay untouched.
        used = set(step.table.flatten().tolist())
        for page in set(range(NUM_PAGES)) - used:
            assert not kv_cache[page].any(), page


def test_context_kv_with_a_plain_weight_projects_only_k_and_v(built: Built):
    """The GPU build keeps ``qkv_proj.weight`` as a plain ``[q; k; v]`` matrix,
    and context_kv then multiplies by its K/V rows only. The CPU build repacks
    the weight, so the test gives each layer a plain matrix (and bias) whose Q
    rows are NaN (reading them would show) and whose K/V rows are twice the
    checkpoint's: K and V must come out doubled (RoPE is linear), which the
    repacked weights cannot produce, so the plain path is the one that ran."""
    step = DraftStep(built, context_lens=[6, 19])
    layers = built.draft.model.layers
    w = built.ref.weights

    def doubled_kv(name: str, suffix: str) -> torch.nn.Parameter:
        q = torch.full_like(w[name + "q_proj." + suffix], float("nan"))
        kv = [2 * w[name + p + suffix] for p in ("k_proj.", "v_proj.")]
        return torch.nn.Parameter(torch.cat([q, *kv]).float(), requires_grad=False)

    replaced = []
    try:
        for j, layer in enumerate(layers):
            proj = layer.self_attn.qkv_proj
            # The CPU build keeps an empty placeholder after repacking.
            assert proj.weight.numel() == 0
            name = f"{built.ref.prefix}layers.{j}.self_attn."
            for suffix in ("weight", "bias"):
                if getattr(proj, suffix, None) is not None:
                    replaced.append((proj, suffix, getattr(proj, suffix)))
                    setattr(proj, suffix, doubled_kv(name, suffix))
        step.store_context()
    finally:
        for proj, suffix, original in replaced:
            setattr(proj, suffix, original)
    for j, kv_cache in enumerate(step.caches):
        head_dim = layers[j].self_attn.head_dim
        for r, L in enumerate(step.context_lens):
            positions = torch.arange(L)
            k, v = read_cache(kv_cache, step.table, r, positions, head_dim)
            want_k, want_v = built.ref.context_kv(j, step.c_ref[r], positions)
            torch.testing.assert_close(k.double(), 2 * want_k, atol=ATOL, rtol=ATOL)
            torch.testing.assert_close(v.double(), 2 * want_v, atol=ATOL, rtol=ATOL)


def test_context_kv_skips_padding_slots_and_dummy_runs(built: Built):
    step = DraftStep(built, context_lens=[5])
    c = step.c_ref[0].float()
    positions = torch.arange(5)
    pad = torch.full((5,), -1, dtype=torch.int64)
    with torch.inference_mode():
        built.draft.precompute_and_store_context_kv(c, positions, None)
        built.draft.precompute_and_store_context_kv(c, positions, pad)
        built.draft.precompute_and_store_context_kv(
            c, positions, [None] * len(built.draft.model.layers)
        )
    assert all(not cache.any() for cache in step.caches)


def check_block_forward_and_base_logits(built: Built) -> None:
    """The block's hidden states and base logits against the reference, for
    a request shorter and one longer than the draft window (16, or 5 for the
    narrow config), so sliding layers must drop the latter's oldest keys."""
    step = DraftStep(built, context_lens=[7, 22])
    step.store_context()
    anchors = [3, 101]
    hidden = step.forward([step.block(a) for a in anchors])
    with torch.inference_mode():
        logits = built.draft.compute_draft_logits(hidden)
    for r, anchor in enumerate(anchors):
        rows = slice(r * BLOCK, (r + 1) * BLOCK)
        want = built.ref.block_hidden(step.c_ref[r], step.block(anchor))
        torch.testing.assert_close(
            hidden[rows].double(), want, atol=HIDDEN_TOL, rtol=HIDDEN_TOL
        )
        torch.testing.assert_close(
            logits[rows].double(),
            built.ref.base_logits(want),
            atol=LOGIT_TOL,
            rtol=HIDDEN_TOL,
        )
    # The tolerance still tells a one-off window apart.
    if SLIDING in built.draft.settings.layer_types:
        window = built.ref.config.sliding_window
        built.ref.config.sliding_window = window + 1
        try:
            off_by_one = built.ref.block_hidden(step.c_ref[1], step.block(anchors[1]))
        finally:
            built.ref.config.sliding_window = window
        assert (hidden[BLOCK:].double() - off_by_one).abs().max() > 20 * HIDDEN_TOL
    # The block's own K/V were written at the query positions.
    for j, kv_cache in enumerate(step.caches):
        head_dim = built.draft.model.layers[j].self_attn.head_dim
        k, _ = read_cache(
            kv_cache, step.table, 1, torch.arange(22, 22 + BLOCK), head_dim
        )
        assert k.abs().sum() > 0


def test_block_forward_and_base_logits_match_reference(built: Built):
    check_block_forward_and_base_logits(built)


def test_cuda_graph_padding_requests_leave_real_requests_exact(built: Built):
    """A padded batch (rows without a sequence) gives the real rows unchanged
    and finite padding rows; the padding's context length is clamped at 0."""
    step = DraftStep(built, context_lens=[7, 22])
    step.store_context()
    blocks = [step.block(a) for a in (3, 101)]
    plain = step.forward(blocks).clone()
    padded = step.forward(blocks, padding_requests=2)
    real_rows = 2 * BLOCK
    torch.testing.assert_close(padded[:real_rows], plain, atol=0, rtol=0)
    assert torch.isfinite(padded[real_rows:]).all()


@pytest.fixture
def fp8_kv_cache(built: Built, monkeypatch):
    """Every draft layer set up as vLLM does for ``--kv-cache-dtype fp8``;
    yields a function that sets the K and V scales of every layer."""
    layers = [layer.self_attn.attn for layer in built.draft.model.layers]
    for attn in layers:
        monkeypatch.setattr(attn, "kv_cache_dtype", "fp8")

    def set_scales(k_scale: float, v_scale: float) -> None:
        for attn in layers:
            attn._k_scale.fill_(k_scale)
            attn._v_scale.fill_(v_scale)

    yield set_scales
    set_scales(1.0, 1.0)


def test_fp8_kv_cache_stores_scaled_bytes_and_reads_them_back(
    built: Built, fp8_kv_cache
):
    """With an fp8 cache the context and block K/V are stored as fp8 bytes of
    ``K / k_scale`` and ``V / v_scale`` and read back times the scales: the
    block's hidden states stay within fp8 rounding of the reference for any
    scales (a writer or reader that drops a scale is off by the scale)."""
    anchors = [3, 101]
    errors = {}
    for k_scale, v_scale in ((1.0, 1.0), (0.05, 0.02), (4.0, 3.0)):
        fp8_kv_cache(k_scale, v_scale)
        step = DraftStep(built, context_lens=[7, 22], cache_dtype=torch.uint8)
        step.store_context()
        hidden = step.forward([step.block(a) for a in anchors]).double()
        want = torch.cat(
            [
                built.ref.block_hidden(c, step.block(a))
                for c, a in zip(step.c_ref, anchors, strict=True)
            ]
        )
        errors[k_scale] = float((hidden - want).abs().max() / want.abs().max())
        # The stored bytes are the scaled keys in fp8.
        attn = built.draft.model.layers[0].self_attn
        k_bytes, _ = read_cache(
            step.caches[0], step.table, 1, torch.arange(22), attn.head_dim
        )
        with torch.inference_mode():
            c = built.draft.combine_hidden_states(torch.cat(step.aux))
            k_true, _ = attn.context_kv(c[7:29], torch.arange(22))
        k_read = k_bytes.view(torch.float8_e4m3fn).double() * k_scale
        k_true = k_true.view_as(k_read).double()
        assert (k_read - k_true).abs().max() <= 0.07 * k_true.abs().max()
    # fp8 e4m3 keeps 3 mantissa bits: a few percent, whatever the scales.
    assert max(errors.values()) < 0.05, errors
    assert min(errors.values()) > 1e-4, errors  # the cache really is fp8


def test_full_draft_layers_stay_full_under_an_all_sliding_target(
    built: Built, monkeypatch, tmp_path
):
    """vLLM gives every layer that declares no window of its own the
    model-level ``CacheConfig.sliding_window``, which it sets when all target
    layers slide. The draft's full layers must still be full: no window in
    the attention layer, a full-attention KV-cache spec; sliding layers
    declare the window the draft chose (full included) and read their own."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.kv_cache_interface import FullAttentionSpec, SlidingWindowSpec

    from vllm_spark2_5_plugin.tools.tiny_checkpoint import make_tiny_checkpoint

    if FULL not in built.draft.settings.layer_types:
        pytest.skip("checked on drafts with a full layer")
    target = make_tiny_checkpoint(tmp_path / "all-sliding", layer_types=[SLIDING] * 4)
    window = json.loads((target / "config.json").read_text())["sliding_window"]
    engine = EngineArgs(model=str(target), max_model_len=256).create_engine_config()
    assert engine.cache_config.sliding_window == window  # vLLM's model-level window

    monkeypatch.setattr(built.vllm_config.cache_config, "sliding_window", window)
    draft = fresh_draft(built, "all-sliding-target.")
    kinds = built.draft.settings.layer_types
    for layer, kind in zip(draft.model.layers, kinds, strict=True):
        attn = layer.self_attn.attn
        spec = attn.get_kv_cache_spec(built.vllm_config)
        if kind == FULL:
            assert attn.sliding_window is None
            assert type(spec) is FullAttentionSpec, spec
        else:
            window = built.draft.settings.sliding_window
            assert layer.self_attn.sliding_window == window  # the kernel's
            declared = draft.kv_cache_choice.window
            assert attn.sliding_window == declared
            if declared is None:
                assert type(spec) is FullAttentionSpec, spec
            else:
                assert type(spec) is SlidingWindowSpec, spec
                assert spec.sliding_window == declared >= window


def test_sliding_layer_ignores_context_keys_outside_its_window(built: Built):
    """Every block query sees exactly positions L-W .. L+B-1 of the context."""
    if built.draft.settings.layer_types != (SLIDING,):
        pytest.skip("checked on the all-sliding draft")
    window = built.draft.settings.sliding_window
    L = window + 6
    step = DraftStep(built, context_lens=[L])
    step.store_context()
    ids = [step.block(5)]
    before = step.forward(ids).clone()
    # Overwrite keys the sliding layer must not see (positions < L - W).
    kv_cache = step.caches[0]
    head_dim = built.draft.model.layers[0].self_attn.head_dim
    k_cache, v_cache = kv_cache.transpose(1, 2).split(head_dim, dim=-1)
    s = slots(step.table, 0, torch.arange(L - window))
    k_cache[s // PAGE, s % PAGE] = 1e3
    v_cache[s // PAGE, s % PAGE] = 1e3
    after = step.forward(ids).clone()
    torch.testing.assert_close(after, before)
    # ... while the oldest position inside the window is read.
    s = slots(step.table, 0, torch.tensor([L - window]))
    k_cache[s // PAGE, s % PAGE] = 1e3
    assert not torch.allclose(step.forward(ids), before)


def run_sequential_markov(built: Built, hidden: torch.Tensor, anchors: list[int]):
    """DSparkSpeculator._sample_sequential, greedy, with the model's hooks."""
    draft = built.draft
    num_reqs = len(anchors)
    with torch.inference_mode():
        base = draft.compute_draft_logits(hidden).view(num_reqs, BLOCK, -1)
        # The speculator reads the anchor from the int32 input-ids buffer.
        prev = torch.tensor(anchors, dtype=torch.int32)
        tokens, embeds, logits = [], [], []
        for i in range(BLOCK):
            e = draft.markov_embed(prev)
            row = base[:, i] + draft.markov_bias(e)
            prev = row.argmax(dim=-1)  # int64 from here on, like the speculator
            tokens.append(prev)
            embeds.append(e.clone())
            logits.append(row)
        confidence = None
        if draft.model.confidence_head is not None:
            confidence = draft.compute_confidence(
                hidden, torch.stack(embeds, dim=1).flatten(0, 1)
            ).view(num_reqs, BLOCK)
    return (
        torch.stack(tokens, dim=1),
        torch.stack(embeds, dim=1),
        torch.stack(logits, dim=1),
        confidence,
    )


def test_markov_heads_and_confidence_over_a_block_match_reference(built: Built):
    step = DraftStep(built, context_lens=[9, 14])
    step.store_context()
    anchors = [42, 7]
    hidden = step.forward([step.block(a) for a in anchors])
    tokens, embeds, logits, confidence = run_sequential_markov(built, hidden, anchors)
    for r, anchor in enumerate(anchors):
        want = built.ref.draft(step.c_ref[r], anchor, BLOCK)
        assert tokens[r].tolist() == want.tokens
        torch.testing.assert_close(
            embeds[r].double(), want.markov_embeds, atol=HIDDEN_TOL, rtol=HIDDEN_TOL
        )
        torch.testing.assert_close(
            logits[r].double(), want.logits, atol=LOGIT_TOL, rtol=HIDDEN_TOL
        )
        if want.confidence is None:
            assert confidence is None
        else:
            torch.testing.assert_close(
                confidence[r].double(),
                want.confidence,
                atol=HIDDEN_TOL,
                rtol=HIDDEN_TOL,
            )
    # Markov biases alone, whole block, against the reference formula.
    with torch.inference_mode():
        bias = built.draft.markov_bias(embeds.flatten(0, 1))
    torch.testing.assert_close(
        bias.double(),
        built.ref.markov_bias(embeds.flatten(0, 1).double()),
        atol=ATOL,
        rtol=ATOL,
    )


def test_markov_state_restarts_at_every_draft_step(built: Built):
    step = DraftStep(built, context_lens=[8])
    step.store_context()
    ids = [step.block(11)]
    first = run_sequential_markov(built, step.forward(ids), [11])
    second = run_sequential_markov(built, step.forward(ids), [11])
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])
    if built.draft.settings.markov_head_type == "rnn":
        # Without the forward's reset the rnn state would carry over.
        carried = run_sequential_markov(built, step.forward(ids).clone(), [11])
        with torch.inference_mode():
            continued = built.draft.markov_embed(torch.tensor([11], dtype=torch.int32))
        assert not torch.allclose(continued, carried[1][:, 0])
        built.draft.model.markov_head.reset_state()
        with torch.inference_mode():
            fresh = built.draft.markov_embed(torch.tensor([11], dtype=torch.int32))
        torch.testing.assert_close(fresh, carried[1][:, 0])


# ---------------------------------------------------------------------------
# Target side: the aux hidden states DSpark consumes
# ---------------------------------------------------------------------------


def test_target_aux_states_are_outputs_of_the_configured_layers(built: Built):
    from vllm.v1.worker.gpu.spec_decode.eagle.eagle3_utils import (
        get_eagle3_aux_layers_from_config,
        set_eagle3_aux_hidden_state_layers,
    )

    ids_list = [5, 77, 300, 12, 9, 41, 250, 8, 19, 64, 3, 99, 120, 7, 88, 200]
    ids_list += [31, 2, 17, 45]
    settings = built.draft.settings
    assert get_eagle3_aux_layers_from_config(built.spec_config) == tuple(
        i + 1 for i in settings.target_layer_ids
    )
    target = built.target
    set_eagle3_aux_hidden_state_layers(target, built.spec_config)
    config = target.config
    positions = torch.arange(len(ids_list))

    # Replace only the attention kernel (vLLM's CPU backend needs the engine)
    # by a dense causal reference; everything else is the vLLM target model.
    def reference_attention(layer_type):
        window = config.sliding_window if layer_type == SLIDING else None

        def forward(q, k, v):
            d = config.head_dim
            out = attention(
                q.view(len(ids_list), -1, d),
                k.view(len(ids_list), -1, d),
                v.view(len(ids_list), -1, d),
                causal_mask(positions, window),
            )
            return out.reshape(len(ids_list), -1)

        return forward

    with pytest.MonkeyPatch.context() as mp:
        for layer in target.model.layers:
            attn = layer.self_attn
            mp.setattr(attn.attn, "forward", reference_attention(attn.layer_type))
        with torch.inference_mode():
            out = target(torch.tensor(ids_list), positions)
    assert isinstance(out, tuple)
    _, aux = out
    stream = Spark2_5Reference.from_checkpoint(built.path).residual_stream(ids_list)
    assert len(aux) == len(settings.target_layer_ids)
    for got, i in zip(aux, settings.target_layer_ids, strict=True):
        scale = stream[i + 1].abs().max()
        torch.testing.assert_close(
            got.double(), stream[i + 1], atol=1e-3 * scale, rtol=1e-3
        )
        # Not the stream entering layer i (the off-by-one this guards against).
        assert (got.double() - stream[i]).abs().max() > 0.05 * scale


def test_draft_ops_keep_vllm_kernels_when_the_target_is_compiled(
    built: Built, monkeypatch
):
    """With torch.compile on, vLLM builds its ops (RMSNorm, RoPE, GELU-and-mul)
    as plain PyTorch for Inductor to fuse. The draft is not compiled, so it
    must re-choose vLLM's kernel for the platform; ops the user disabled by
    name, and the target's (possibly shared) ops, keep vLLM's choice. The
    numerics of that kernel path are what every other test here checks: the
    eager fixture enables all ops."""
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.custom_op import CustomOp
    from vllm.model_executor.layers.layernorm import RMSNorm

    def custom_ops(module):
        return [m for m in module.modules() if isinstance(m, CustomOp)]

    def chosen(op) -> str:
        return op._forward_method.__func__.__name__

    target_before = {id(op): chosen(op) for op in custom_ops(built.target)}
    compilation = built.vllm_config.compilation_config
    monkeypatch.setattr(compilation, "custom_ops", ["none"])
    with set_current_vllm_config(built.vllm_config):
        assert chosen(RMSNorm(8)) == "forward_native"  # what vLLM picks here
    draft = fresh_draft(built, "compiled-target.")
    ops = custom_ops(draft)
    names = {type(op).name for op in ops}
    assert {"rms_norm", "rotary_embedding", "gelu_and_mul"} <= names
    assert all(chosen(op) == "forward_cpu" for op in ops), {
        type(op).name: chosen(op) for op in ops
    }
    assert draft.platform_kernels == sorted(names)
    target_after = {id(op): chosen(op) for op in custom_ops(built.target)}
    assert target_after == target_before
    assert not {id(op) for op in ops} & set(target_before)

    monkeypatch.setattr(compilation, "custom_ops", ["none", "-rms_norm"])
    draft = fresh_draft(built, "compiled-target-no-rms-norm.")
    for op in custom_ops(draft):
        want = "forward_native" if type(op).name == "rms_norm" else "forward_cpu"
        assert chosen(op) == want, (type(op).name, chosen(op))
    assert "rms_norm" not in draft.platform_kernels
