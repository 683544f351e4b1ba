# SPDX-License-Identifier: Apache-2.0
"""The parts of the Spark2_5 DSpark draft that differ from the target's.

* :class:`Spark2_5MarkovHead`: vLLM's DSpark Markov head plus the ``rnn``
  recurrence;
* :class:`Spark2_5DSparkAttention`: a Spark2_5 attention layer whose keys are
  the draft's context K/V plus the block, seen without a causal mask;
* :class:`Spark2_5DSparkDecoderLayer`: the target's decoder layer with that
  attention.

The math is in ``docs/dspark.md``; the model that assembles them is
:mod:`vllm_spark2_5_plugin.models.spark2_5_dspark`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from vllm.model_executor.layers.linear import ReplicatedLinear, UnquantizedLinearMethod
from vllm.model_executor.layers.quantization import QuantizationConfig
from vllm.model_executor.models.utils import maybe_prefix

from vllm_spark2_5_plugin import vllm_seam
from vllm_spark2_5_plugin.models.spark2_5 import (
    Spark2_5Attention,
    Spark2_5DecoderLayer,
    Spark2_5LayerSpec,
)
from vllm_spark2_5_plugin.names import FULL
from vllm_spark2_5_plugin.ops.v_pages import write_kv_cache_reference

DSparkMarkovHead, DSparkConfidenceHead = vllm_seam.dspark_heads()

# ---------------------------------------------------------------------------
# Heads
# ---------------------------------------------------------------------------


class Spark2_5MarkovHead(DSparkMarkovHead):
    """vLLM's DSpark Markov head, plus the ``rnn`` recurrence.

    ``vanilla``: ``e_i = markov_w1[prev_i]`` (vLLM's head as is).
    ``rnn``:     ``e_i = tanh(markov_w1[prev_i] + e_{i-1} rnn_proj^T)``,
                 ``e_{-1} = 0`` at every draft step.

    The speculator calls :meth:`embed` K times per draft step with only the
    previous tokens, so the rnn state ``e_{i-1}`` lives here, in a static
    ``[max_num_reqs, r]`` buffer. It is zeroed by :meth:`reset_state`, which
    the draft's ``forward`` calls: vLLM runs exactly one draft forward before
    the K sequential Markov calls of each step (eagerly and inside the same
    FULL CUDA graph), so the reset is part of every step. Everything is
    in-place tensor work on fixed buffers (no host sync, no Python step
    counter), hence capture-safe; replays reset and advance the same memory.
    """

    def __init__(
        self,
        vocab_size: int,
        markov_rank: int,
        head_type: str,
        max_num_reqs: int,
        quant_config: QuantizationConfig | None = None,
        prefix: str = "",
    ) -> None:
        # Full-vocabulary draft: draft ids are target ids.
        super().__init__(vocab_size, vocab_size, markov_rank, prefix, quant_config)
        self.head_type = head_type
        if head_type == "rnn":
            self.rnn_proj = ReplicatedLinear(
                markov_rank,
                markov_rank,
                bias=False,
                return_bias=False,
                prefix=maybe_prefix(prefix, "rnn_proj"),
            )
            self.register_buffer(
                "rnn_state", torch.zeros(max_num_reqs, markov_rank), persistent=False
            )
        else:
            self.rnn_proj = None
            self.rnn_state = None

    def reset_state(self) -> None:
        """Start a new draft step: ``e_{-1} = 0`` for every request."""
        if self.rnn_state is not None:
            self.rnn_state.zero_()

    def embed(self, token_ids: torch.Tensor) -> torch.Tensor:
        """``[R]`` previous tokens (int32 or int64) -> ``[R, r]`` embedding."""
        e = super().embed(token_ids)
        if self.rnn_proj is None:
            return e
        num_reqs = token_ids.shape[0]
        if num_reqs > self.rnn_state.shape[0]:
            raise ValueError(
                f"rnn Markov head got {num_reqs} requests but its state holds "
                f"{self.rnn_state.shape[0]} (max_num_seqs)"
            )
        state = self.rnn_state[:num_reqs]
        e = torch.tanh(e + self.rnn_proj(state.to(e.dtype)))
        state.copy_(e)
        return e


# ---------------------------------------------------------------------------
# Attention over context + block
# ---------------------------------------------------------------------------


def store_kv_reference(
    kv_cache: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    slot_mapping: torch.Tensor,
    head_dim: int,
    quant: vllm_seam.KVCacheQuant | None = None,
) -> None:
    """Write ``key``/``value`` rows into vLLM's paged cache at ``slot_mapping``.

    ``kv_cache`` is the per-layer ``[num_blocks, nKV, block_size, 2*D]`` view
    that FlashAttention/Triton use (any strides); ``slot = block *
    block_size + offset``; negative slots (``PAD_SLOT_ID``) are skipped, and
    like vLLM's writers only the first ``len(slot_mapping)`` rows are used.
    Plain PyTorch (``ops.write_kv_cache_reference``, with a host-side mask):
    the CPU/test path. On CUDA the attention backend's own
    ``do_kv_cache_update`` writes the same layout.
    With ``quant`` (an fp8 cache) the rows are stored as ``K / k_scale`` and
    ``V / v_scale`` in fp8, saturated at the format's largest finite value
    as vLLM's cache writer does.
    """
    _write_kv(
        write_kv_cache_reference, kv_cache, key, value, slot_mapping, head_dim, quant
    )


def _write_kv(writer, kv_cache, key, value, slot_mapping, head_dim, quant, **options):
    """``writer`` (``ops.write_kv_cache`` or its reference) on the K/V views of
    the per-layer ``kv_cache``, with ``quant``'s scales for an fp8 cache."""
    scales = (None, None) if quant is None else (quant.k_scale, quant.v_scale)
    writer(
        key,
        value,
        *vllm_seam.split_kv_cache(kv_cache, head_dim, quant),
        slot_mapping,
        *scales,
        **options,
    )


class Spark2_5DSparkAttention(Spark2_5Attention):
    """A Spark2_5 attention layer whose keys are context K/V plus the block.

    Every block query of a request with ``L`` context tokens sees, with no
    causal mask, positions ``max(0, L - W_d) .. L+B-1`` (sliding) or
    ``0 .. L+B-1`` (full). The vLLM ``Attention`` child owns the paged cache
    and its metadata (for sliding layers it also tells the KV manager the
    window, so older blocks can be freed). Sliding layers compute with
    :func:`fixed_history_attention` (FlashAttention/Triton would give each
    query its own symmetric window instead); full layers use vLLM's backend on
    CUDA (non-causal, the speculator's metadata). On CPU, where vLLM cannot
    run DSpark, both use the PyTorch reference of the kernel, which is how
    the tests run this exact code.
    """

    def __init__(self, spec: Spark2_5LayerSpec, prefix: str = "") -> None:
        super().__init__(spec, prefix=prefix)
        self.scale = self.head_dim**-0.5

    # -- context K/V -----------------------------------------------------------

    def context_kv(
        self, states: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``K = RoPE(c Wk (+bk))``, ``V = c Wv (+bv)`` for context features."""
        k, v = self._context_kv_rows(states).split([self.kv_size, self.kv_size], -1)
        k = k.contiguous()
        # RoPE on K only (vLLM's rotary ops take key=None); in place on k.
        k, _ = self.rotary_emb(positions, k, None)
        return k, v.contiguous()

    def _context_kv_rows(self, states: torch.Tensor) -> torch.Tensor:
        """``[T, 2 * kv_size]``: the K and V columns of ``qkv_proj`` for ``states``.

        Every prompt token passes through here once, so skipping Q (two thirds
        of the fused projection at 4 query heads per KV head) matters for long
        prompts. A plain weight matrix is multiplied by its K/V rows only;
        quantised weights and the CPU build's repacked ones (which keep no
        plain ``weight``) run the whole fused projection and drop Q.
        """
        proj = self.qkv_proj
        weight = getattr(proj, "weight", None)
        plain = (
            isinstance(getattr(proj, "quant_method", None), UnquantizedLinearMethod)
            and isinstance(weight, torch.Tensor)
            and weight.dim() == 2
            and weight.shape[0] == self.q_size + 2 * self.kv_size
            and weight.device == states.device
        )
        if not plain:
            return proj(states)[0][:, self.q_size :]
        bias = getattr(proj, "bias", None)
        return F.linear(
            states,
            weight[self.q_size :],
            None if bias is None else bias[self.q_size :],
        )

    def v_pages_transposed(self, kv_cache: torch.Tensor) -> bool:
        """Whether this layer keeps V's pages transposed in ``kv_cache``
        (``ops.v_pages``): a sliding layer with an fp8 cache where the
        launch policy prefers it (``ops.v_pages_preferred``: on Hopper the
        Gluon kernel then multiplies the pages as copied). Only this
        layer's own writer and the fixed-history kernel touch its cache, and
        the answer depends only on the layer and the cache, so every write
        and read of the cache agrees."""
        if self.sliding_window is None or not kv_cache.is_cuda:
            return False
        from vllm_spark2_5_plugin.ops import v_pages_preferred

        return v_pages_preferred(
            kv_cache.device,
            kv_fp8=vllm_seam.kv_cache_quant(self.attn) is not None,
            head_dim=self.head_dim,
            page_size=kv_cache.shape[2],
        )

    def store_kv(
        self,
        key: torch.Tensor,
        value: torch.Tensor,
        slot_mapping: torch.Tensor,
    ) -> None:
        """Write K/V rows into this layer's paged cache."""
        kv_cache = vllm_seam.layer_kv_cache(self.attn)
        self._store_kv(
            key, value, slot_mapping, kv_cache, self.v_pages_transposed(kv_cache)
        )

    def _store_kv(self, key, value, slot_mapping, kv_cache, v_pages: bool) -> None:
        """:meth:`store_kv` into ``kv_cache``, whose V pages are transposed
        where ``v_pages`` (:meth:`v_pages_transposed`)."""
        if v_pages:
            # vLLM's writer stores whole V rows, which would overwrite other
            # keys' values in a transposed page.
            from vllm_spark2_5_plugin.ops import write_kv_cache

            _write_kv(
                write_kv_cache, kv_cache, key, value, slot_mapping, self.head_dim,
                vllm_seam.kv_cache_quant(self.attn), v_pages_transposed=True,
            )  # fmt: skip
        elif kv_cache.is_cuda:
            vllm_seam.write_kv_cache(
                self.attn,
                key.view(-1, self.num_kv_heads, self.head_dim),
                value.view(-1, self.num_kv_heads, self.head_dim),
                kv_cache,
                slot_mapping,
            )
        else:
            store_kv_reference(
                kv_cache,
                key,
                value,
                slot_mapping,
                self.head_dim,
                vllm_seam.kv_cache_quant(self.attn),
            )

    # -- block forward ---------------------------------------------------------

    def forward(self, positions: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        qkv, _ = self.qkv_proj(x)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q, k = self.rotary_emb(positions, q, k)
        if self.layer_type == FULL and x.is_cuda:
            attn_output = self.attn(q, k, v)
        else:
            attn_output = self._fixed_history(q, k, v)
        output, _ = self.o_proj(self.gate(attn_output, x))
        return output

    def _fixed_history(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:
        from vllm_spark2_5_plugin.ops import (
            fixed_history_attention,
            fixed_history_attention_reference,
        )

        num_tokens = q.shape[0]
        out = torch.zeros(
            num_tokens, self.num_heads, self.head_dim, dtype=q.dtype, device=q.device
        )
        paged = vllm_seam.paged_attention_inputs(self.attn.layer_name)
        if paged is None:  # profiling / dummy run: no cache, no metadata
            return out.view(num_tokens, -1)
        v_pages = self.v_pages_transposed(paged.cache)
        self._store_kv(k, v, paged.slot_mapping, paged.cache, v_pages)

        seq_lens = paged.seq_lens  # context + block, per request
        num_reqs = seq_lens.shape[0]
        query_start_loc = paged.query_start_loc[: num_reqs + 1]
        # Clamped: FULL-graph padding requests own query rows but no sequence.
        context_lens = (seq_lens - query_start_loc.diff()).clamp(min=0).to(torch.int32)
        quant = vllm_seam.kv_cache_quant(self.attn)
        k_cache, v_cache = vllm_seam.split_kv_cache(paged.cache, self.head_dim, quant)
        scales = {}
        if quant is not None:
            scales = {"k_scale": quant.k_scale, "v_scale": quant.v_scale}
        attend = (
            fixed_history_attention if q.is_cuda else fixed_history_attention_reference
        )
        attend(
            q.reshape(num_tokens, self.num_heads, self.head_dim),
            k_cache,
            v_cache,
            paged.block_table,
            context_lens,
            query_start_loc,
            self.sliding_window,  # None for full layers
            self.scale,
            out=out,
            v_pages_transposed=v_pages,
            **scales,
        )
        return out.view(num_tokens, -1)


class Spark2_5DSparkDecoderLayer(Spark2_5DecoderLayer):
    """A Spark2_5 decoder layer (same weights, same math) with DSpark attention."""

    attention_cls = Spark2_5DSparkAttention


__all__ = [
    "DSparkConfidenceHead",
    "Spark2_5DSparkAttention",
    "Spark2_5DSparkDecoderLayer",
    "Spark2_5MarkovHead",
    "store_kv_reference",
]
