# SPDX-License-Identifier: Apache-2.0
"""Launch policy of the fixed-history attention kernel.

:func:`plan_launch` picks tile sizes, warps, stages, splits and the grid from
host-side values only (no device-to-host sync, so a launch can be captured in a
CUDA graph). :func:`launch_kernel` runs the kernels for a given
:class:`LaunchPlan`: the Triton kernel, or on Hopper at D = 128 the
warp-specialized Gluon kernel (``ops.fixed_history_gluon``).

The choices were tuned on an H200 under Triton 3.7.1 (vLLM 0.32.0's); the
comments give the reason for each with the gain measured there ("shape N" is
row N of the five-shape benchmark). The runs behind the figures, and the
variants that were slower, are in ``benchmarks/fixed_history_attention_h200.md``.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os

import torch

from vllm_spark2_5_plugin.ops.fixed_history_checks import PagedKV, interpreting
from vllm_spark2_5_plugin.ops.fixed_history_kernel import (
    combine_splits_kernel,
    fixed_history_kernel,
)

_LOG2E = 1.4426950408889634
_MAX_ITEMS = 2**31 - 1  # (request, KV head, split) items per launch: int32
_SM_COUNT: dict[int, int] = {}
# "0" (or false/no/off) keeps the Triton kernel where the Gluon kernel would
# run: a way around it without a code change, and the A/B of the two inside
# vLLM. "f16-scores" leaves it on but keeps fp8 caches off its fp8 scores
# (``LaunchPlan.fp8_scores``): q K^T from float16 dots with q as given, the
# numerics of the kernels before fp8 scores. "fp8-scores" names the default
# explicitly (the same as on).
GLUON_ENV = "SPARK2_5_GLUON"
_F16_SCORES = "f16-scores"
_OFF = ("0", "false", "no", "off")
_ON = ("", "1", "true", "yes", "on", "fp8-scores", _F16_SCORES)


@dataclasses.dataclass(frozen=True)
class LaunchPlan:
    """How to launch the kernel.

    ``programs_per_sm > 0`` asks for a persistent grid of
    ``min(items, programs_per_sm * SMs)`` programs that loop over the
    (request, KV head) items; it needs ``num_splits == 1``. ``0``: one
    program per (request, KV head, split) item. ``asm_page_load`` reads the
    page ids with inline PTX (NVIDIA only; ignored under the interpreter).
    ``fp8_f16_dot`` (fp8 caches only): float16 dot products with V converted
    in registers, instead of K/V tiles converted to q's dtype.
    ``fp8_e4m3_dot`` (fp8 caches only, opt-in, never chosen by
    :func:`plan_launch`): q and the softmax weights rounded to e4m3 and both
    dot products on fp8 tensor cores; this changes the numerics
    (``docs/kernel.md``, "fp8 tensor-core dots").
    ``gluon`` (tiles of 64 or 128 rows, head dim 64 or 128, one split, fp8
    scales as device tensors, where :func:`gluon_supported`): the
    warp-specialized Gluon kernel with its own 64-key pipeline (2 persistent
    programs per SM at 64 rows, 1 at 128) instead of the Triton kernel;
    otherwise the other fields' Triton launch.
    ``fp8_scores`` (``gluon`` with ``fp8_f16_dot``; chosen by
    :func:`plan_launch` wherever those are, unless
    ``SPARK2_5_GLUON=f16-scores``): where the Gluon kernel copies the fp8
    cache by TMA, ``Q K^T`` on fp8 tensor cores with each row of q rounded
    to e4m3 (``docs/kernel.md``, the Gluon kernel's ``fp8_scores``: the
    rounding, its error bound, and DSpark's acceptance with it).
    ``max_registers`` (Triton kernel only; 0: the compiler's choice): a cap
    on the registers per thread (Triton's ``maxnreg``), so that more warps
    fit on an SM where a plan is bound by latency rather than by issue.
    ``transposed`` (Triton kernel only): both dot products transposed,
    ``S^T = K Q^T`` and ``O^T += V^T P^T``, the keys as the dots' rows and
    the tile's query rows as their columns, so that a tile needs 8 rows
    instead of 16 (``tile_rows``; e.g. 8 queries x 1 head without padding
    rows: half the dot products and exponentials).
    ``half_rows`` (``gluon`` with 64-row tiles): the Gluon kernel's
    ``half_rows``: a tile carries ``block_q // 2`` queries (32 rows) and the
    softmax skips its 32 padding rows; for the 32-row tiles that
    :func:`plan_launch` widens to 64 so that the Gluon kernel runs them.
    ``wide_tiles`` (``fp8_scores`` with 128-row tiles; ignored otherwise, so
    that a plan stripped of its fp8 scores stays valid): the Gluon
    kernel's 128-key tiles instead of 64-key ones, for items of about 2048
    keys and more (:func:`plan_launch` from its estimate of the keys per
    item).
    """

    block_q: int  # queries of one request per tile
    block_n: int  # keys per tile
    num_splits: int  # slices of each request's key range
    num_warps: int
    num_stages: int
    asm_page_load: bool = False
    programs_per_sm: int = 0
    fp8_f16_dot: bool = False
    fp8_e4m3_dot: bool = False
    gluon: bool = False
    fp8_scores: bool = False
    max_registers: int = 0
    transposed: bool = False
    half_rows: bool = False
    wide_tiles: bool = False

    def __post_init__(self):
        for name in ("block_q", "block_n", "num_splits", "num_warps"):
            value = getattr(self, name)
            if value < 1 or value & (value - 1):
                raise ValueError(f"{name} must be a power of two, got {value}")
        if self.block_n < 16:
            raise ValueError(f"block_n must be at least 16, got {self.block_n}")
        if self.num_stages < 1 or self.programs_per_sm < 0:
            raise ValueError(
                f"num_stages must be >= 1 and programs_per_sm >= 0, got "
                f"{self.num_stages} and {self.programs_per_sm}"
            )
        if self.max_registers and not 24 <= self.max_registers <= 255:
            raise ValueError(
                f"max_registers must be 0 (no cap) or 24..255 registers per "
                f"thread, got {self.max_registers}"
            )
        if self.fp8_f16_dot and self.fp8_e4m3_dot:
            raise ValueError("fp8_f16_dot and fp8_e4m3_dot exclude each other")
        if self.fp8_e4m3_dot and self.block_n < 32:
            raise ValueError(
                f"fp8_e4m3_dot needs block_n >= 32 (an e4m3 dot product sums "
                f"over at least 32 keys), got block_n={self.block_n}"
            )
        if self.fp8_f16_dot and self.block_n < 32:
            # The kernel computes the right thing (the Triton interpreter
            # agrees with the reference), but Triton's sm_90 build of this
            # path with 16-key tiles gives outputs off by more than 100%, at
            # every head dim and warp count tried.
            raise ValueError(
                f"fp8_f16_dot needs block_n >= 32 (Triton miscompiles it with "
                f"16-key tiles), got block_n={self.block_n}"
            )
        if self.gluon and (self.num_splits != 1 or self.fp8_e4m3_dot):
            raise ValueError(
                "gluon needs num_splits == 1 and bfloat16/float16 dots, got "
                f"num_splits={self.num_splits}, fp8_e4m3_dot={self.fp8_e4m3_dot}"
            )
        if self.gluon and self.max_registers:
            raise ValueError(
                "max_registers caps the Triton kernel's registers; the Gluon "
                f"kernel sets its own (gluon=True, max_registers={self.max_registers})"
            )
        if self.transposed and (self.gluon or self.fp8_e4m3_dot):
            raise ValueError(
                "transposed is for the Triton kernel's bfloat16/float16 dots, got "
                f"gluon={self.gluon}, fp8_e4m3_dot={self.fp8_e4m3_dot}"
            )
        if self.fp8_scores and not (self.gluon and self.fp8_f16_dot):
            raise ValueError(
                "fp8_scores needs gluon=True and fp8_f16_dot=True, got "
                f"gluon={self.gluon}, fp8_f16_dot={self.fp8_f16_dot}"
            )
        if self.programs_per_sm and self.num_splits != 1:
            raise ValueError(
                f"a persistent grid (programs_per_sm={self.programs_per_sm}) "
                f"needs num_splits == 1, got num_splits={self.num_splits}"
            )
        if self.half_rows and not (self.gluon and self.block_q >= 2):
            raise ValueError(
                "half_rows is for the Gluon kernel's tiles of 2 or more queries, "
                f"got gluon={self.gluon}, block_q={self.block_q}"
            )

    def tile_rows(self, group: int) -> int:
        """Rows of a tile (BLOCK_M) for ``group`` query heads per KV head."""
        return _tile_rows(self.block_q, group, 8 if self.transposed else 16)


def _gluon_pipeline(
    rows: int,
    *,
    kv_fp8: bool,
    tma: bool = False,
    fp8_scores: bool = False,
    half_rows: bool = False,
    wide_tiles: bool = False,
    v_pages: bool = False,
) -> dict:
    """The Gluon kernel's pipeline options beyond its defaults.

    * ``tma`` (the caches can be copied by the tensor memory accelerator,
      ``_tma_copyable``): the loader copies whole pages with it (13% less
      time at 128 rows), and an fp8 cache's raw tiles are staged by it
      (2-9% at fp8 shapes 1, 3 and 4); the multiplying warps then fence only
      the tiles ``cp.async`` copied (``edge_fence``: 2% at fp8 shapes 1 and
      3).
    * fp8 caches: the loader converts 8 values per thread, so that its
      stores into the ring have no bank conflicts (8-15% at fp8 shapes 1-4).
    * 128-row tiles: two multiplying partitions of 64 rows (``split_mma``;
      one partition of 8 warps synchronizes both warpgroups at every tile)
      and a ring of 4. With a cache in q's dtype that TMA cannot copy, the
      multiplying warps also fence each tile (``fence_in_mma``, 5%; not for
      64-row tiles, where two programs share an SM and it cost up to 27%,
      nor for fp8 caches, where it gained nothing).
    * ``fp8_scores`` (fp8 caches copied by TMA; else ignored): the kernel's
      fp8 scores; at 64 rows with a ring of 3 and 3 staged V tiles (the
      fastest split of the shared memory tried), one warp issuing the copies
      and two converting V (``issue_warp``, 3-5%), the tiles that reach
      outside the window copied by TMA too (``edge_tma``, 1-3%; slower at
      128 rows), and an item's last tile multiplied as 16 keys where it fits
      (``narrow_tail``, 1%).
    * ``half_rows`` (64-row tiles that hold 32 rows of queries): the softmax
      on those rows alone (3-5% at fp8 shapes 1-3, as fast with bf16).
    * ``wide_tiles`` (long key ranges, the plan's choice): the 128-row
      fp8-scores pipeline takes 128-key tiles with a ring of 2 and 2 staged
      V tiles (8% at fp8 shape 4; slower with bf16 caches), and runs the
      softmax on float16 pairs of float16 scores (``packed_softmax``, its
      second multiplying partition at 200 registers, where it does not
      spill: 5% more; no gain at the 64-row shapes, which keep float32
      scores).
    """
    options = {"narrow_convert": True} if kv_fp8 else {}
    if half_rows and rows == 64:
        options.update(half_rows=True)
    if tma:
        options.update(tma=True, edge_fence=True)
        if kv_fp8 and fp8_scores:
            options.update(fp8_scores=True, narrow_tail=True)
            if rows == 64:
                options.update(ring=3, raw_slots=3, issue_warp=True, edge_tma=True)
    if rows == 128:
        options.update(split_mma=True, ring=4)
        if options.get("fp8_scores") and wide_tiles:
            options.update(
                block_n=128, ring=2, raw_slots=2, packed_softmax=True, mma_regs=200
            )
        elif not kv_fp8 and not tma:
            options.update(fence_in_mma=True)
    if v_pages and options.get("fp8_scores"):
        # V's pages held transposed in the cache (fp8 scores only, else the
        # Triton kernel runs): 8-bit P V on them as copied, a ring of 4, and
        # none of the options 8-bit P V lacks (at 64 rows: 32 padding rows
        # per tile then). 3-12% faster than over V in rows at fp8 shapes
        # 1-4.
        for name in ("half_rows", "issue_warp", "edge_tma", "narrow_tail"):
            options.pop(name, None)
        options.pop("packed_softmax", None)
        options.update(v_pages=True, ring=4)
        if options.get("block_n") == 128:
            # 128-key tiles: the second multiplying partition at 192
            # registers and the loader at 120 (the best of the splits
            # tried, 1.5% at fp8 shape 4); a ring of 5 (177 KB of shared
            # memory), since under load the two partitions run 1.5-3 tiles
            # apart and the one ahead waits for its tiles (0.5%); and the
            # loader in warps 0-3 (``loader_first``): as the default
            # partition the first multiplying partition started its first
            # tile about 5 us late while the kernel's code came from memory,
            # and stayed behind to the end (1%).
            options.update(mma_regs=192, worker_regs=120, ring=5, loader_first=True)
    return options


def _tma_copyable(q: torch.Tensor, *caches: torch.Tensor) -> bool:
    """Whether the Gluon kernel's TMA loader can copy the caches: all in q's
    dtype (head dim a multiple of 64) or all fp8 (head dim a multiple of
    128: 128 bytes per copy), pages of at most 64 keys that divide a 64-key
    tile, 16-byte-aligned addresses and strides."""
    dtypes = {cache.dtype for cache in caches}
    if len(dtypes) != 1 or not dtypes <= {q.dtype, torch.float8_e4m3fn}:
        return False
    for cache in caches:
        size = cache.element_size()
        if (
            64 % cache.shape[1]
            or cache.shape[3] % (128 // size)
            or cache.stride(3) != 1
            or cache.data_ptr() % 16
            or any(stride * size % 16 for stride in cache.stride()[:3])
        ):
            return False
    return True


def sm_count(device: torch.device) -> int:
    """Streaming multiprocessors of a CUDA device (cached); 4 elsewhere, so
    that the split path gets exercised under the interpreter too."""
    if device.type != "cuda":
        return 4
    idx = device.index if device.index is not None else torch.cuda.current_device()
    if idx not in _SM_COUNT:
        _SM_COUNT[idx] = torch.cuda.get_device_properties(idx).multi_processor_count
    return _SM_COUNT[idx]


def compile_options(plan: LaunchPlan) -> dict[str, int]:
    """The Triton compile options of :func:`fixed_history_kernel` for
    ``plan`` (keyword arguments of its launch, and of ``triton.compile``)."""
    options = dict(num_warps=plan.num_warps, num_stages=plan.num_stages)
    if plan.max_registers:
        options.update(maxnreg=plan.max_registers)
    return options


@functools.cache
def _gluon_device(idx: int) -> bool:
    """An sm_90 GPU and a Triton whose Gluon kernel has run there."""
    if torch.cuda.get_device_capability(idx) != (9, 0):
        return False
    import triton

    # Run on an H200 under vLLM 0.32.0's Triton 3.7.1 only; Gluon's API
    # moves between releases.
    if not triton.__version__.startswith("3.7."):
        return False
    try:
        from vllm_spark2_5_plugin.ops import fixed_history_gluon  # noqa: F401
    except (ImportError, AttributeError):
        return False
    return True


@functools.cache
def gluon_allowed(value: str | None) -> bool:
    """Whether ``SPARK2_5_GLUON`` (its value, ``None`` when unset) lets the
    Gluon kernel run; an unknown value leaves it on, with one warning."""
    word = (value or "").strip().lower()
    if word in _OFF:
        return False
    if word not in _ON:
        logging.getLogger("vllm.spark2_5_plugin.ops").warning(
            "%s=%r is not one of %s (off) or %s (on); leaving the Gluon kernel on",
            GLUON_ENV,
            value,
            "/".join(_OFF),
            "/".join(w for w in _ON if w),
        )
    return True


def gluon_fp8_scores(value: str | None) -> bool:
    """Whether ``SPARK2_5_GLUON`` (its value) leaves fp8 caches on the Gluon
    kernel's fp8 scores: unless it is ``f16-scores``."""
    return (value or "").strip().lower() != _F16_SCORES


def gluon_supported(device: torch.device) -> bool:
    """Whether the Gluon kernel can run on ``device`` (cached per device):
    a CUDA build of torch on NVIDIA, an sm_90 (Hopper) GPU, Triton 3.7, and
    not the interpreter; ``SPARK2_5_GLUON=0`` turns it off."""
    if device.type != "cuda" or torch.version.hip is not None or interpreting():
        return False
    if not gluon_allowed(os.environ.get(GLUON_ENV)):
        return False
    if not torch.cuda.is_available():
        return False
    idx = device.index if device.index is not None else torch.cuda.current_device()
    return _gluon_device(idx)


#: "0" (or false/no/off) keeps vLLM's row layout in the caches the plugin
#: writes itself where :func:`v_pages_preferred` would transpose V's pages.
V_PAGES_ENV = "SPARK2_5_V_PAGES"


def v_pages_preferred(
    device: torch.device, *, kv_fp8: bool, head_dim: int, page_size: int
) -> bool:
    """Whether a cache that only the plugin writes and reads (the DSpark
    draft's sliding layers) should hold V's pages transposed
    (``write_kv_cache(v_pages_transposed=True)``): an fp8 cache with pages
    of 16 keys and head dim 128 on a device where the Gluon kernel runs with
    fp8 scores, whose 8-bit ``P V`` then reads V's pages as TMA copies them
    (no staging, no transposing); not under ``SPARK2_5_V_PAGES=0``. Where a
    launch does not take the Gluon kernel (too few items for its 128-row
    plan, say), the Triton kernel reads the same layout, 25-35% more slowly
    than rows."""
    if os.environ.get(V_PAGES_ENV, "").strip().lower() in _OFF:
        return False
    return (
        kv_fp8
        and head_dim == 128
        and page_size == 16
        and gluon_supported(device)
        and gluon_fp8_scores(os.environ.get(GLUON_ENV))
    )


def _next_pow2(x: int) -> int:
    return 1 << max(0, (int(x) - 1).bit_length())


def _tile_rows(block_q: int, group: int, least: int = 16) -> int:
    """block_q queries x group query heads, padded to a power of two >=
    ``least`` (a dot's fewest rows; 8 columns for a transposed tile)."""
    return max(least, _next_pow2(block_q * group))


def _gluon_widens_bf16(
    block_q: int, group: int, pairs: int, target: int, est_span: int
) -> bool:
    """Whether 32-row D = 128 tiles over a bf16/fp16 cache are widened to 64
    rows for the Gluon kernel: GQA 1-8 filling the rows exactly, and a single
    split (the split loop of :func:`plan_launch` stops at once when the items
    reach ``target`` or the span is shorter than 8 key tiles of 64)."""
    one_split = pairs >= target or est_span // 2 < 4 * 64
    return block_q * 2 * group == 64 and group <= 8 and one_split


def plan_launch(
    *,
    num_tokens: int,
    num_reqs: int,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    sliding_window: int | None,
    max_kv_len: int,
    device: torch.device,
    num_sms: int | None = None,
    kv_fp8: bool = False,
) -> LaunchPlan:
    """The launch that measured best on an H200 for these shapes.

    Host-side values only: ``max_kv_len`` is the block-table capacity
    (max_blocks * block_size), ``num_sms`` defaults to ``sm_count(device)``
    and ``kv_fp8`` says the caches are fp8.
    The branches and their measurements: ``docs/kernel.md`` and
    ``benchmarks/fixed_history_attention_h200.md``. Plans are cached by
    these values (a decode step asks for the same few shapes again and
    again).
    """
    device_facts = (
        sm_count(device) if num_sms is None else num_sms,
        device.type == "cuda",
        torch.version.hip is None,  # not a ROCm build of torch
        gluon_supported(device),
        gluon_fp8_scores(os.environ.get(GLUON_ENV)),
    )
    shape = (num_tokens, num_reqs, num_heads, num_kv_heads, head_dim, kv_fp8)
    return _plan(shape, sliding_window, max_kv_len, device_facts)


@functools.lru_cache(maxsize=1024)
def _plan(
    shape: tuple[int, int, int, int, int, bool],
    sliding_window: int | None,
    max_kv_len: int,
    device_facts: tuple[int, bool, bool, bool, bool],
) -> LaunchPlan:
    """:func:`plan_launch` from host values only: ``shape`` holds its shape
    arguments and ``kv_fp8``, ``device_facts`` the SM count, whether the
    device is a GPU, an NVIDIA one, one the Gluon kernel runs on, and
    whether fp8 caches may take fp8 scores (not under
    ``SPARK2_5_GLUON=f16-scores``)."""
    num_tokens, num_reqs, num_heads, num_kv_heads, head_dim, kv_fp8 = shape
    num_sms, on_cuda, nvidia, gluon_ok, scores_ok = device_facts
    group = num_heads // num_kv_heads
    avg_q = max(1, -(-num_tokens // max(num_reqs, 1)))
    max_rows = 64 if head_dim >= 256 else 128
    block_q = _next_pow2(avg_q)
    while block_q > 1 and block_q * group > max_rows:
        block_q //= 2
    block_m = _tile_rows(block_q, group)
    asm = False
    persistent = 0
    max_registers = 0
    transposed = False
    gluon = half_rows = False
    target = int(3.5 * num_sms)
    window = max_kv_len if sliding_window is None else sliding_window
    est_span = min(max_kv_len, window + avg_q)
    pairs = max(1, num_reqs * num_kv_heads)
    # asm: page ids through inline PTX, so that K/V are pipelined
    # num_stages - 1 tiles ahead instead of one.
    # fp8 caches take the bf16 tiles except at D <= 64 with up to 32 rows:
    # twice the keys per tile (the same bytes) and one stage less, 14% faster
    # at shape 5 (at 128-row tiles 14-38% slower under Triton 3.7.1).
    if block_m >= 128:
        # About one (2-CTA) wave: more splits only add partials to merge.
        block_n, num_warps, num_stages, asm = 32, 4, 4, True
        target = num_sms
        # On Hopper at D = 128, 128-row tiles with enough (request, KV head)
        # items for most SMs run in the Gluon kernel (8 multiplying warps,
        # one program per SM, one split): 31% faster than the Triton
        # kernel's two splits at fp8 shape 4 (128 items on 132 SMs), 26% with
        # bf16 caches.
        if (
            head_dim == 128
            and block_m == 128
            and block_q * group == 128
            and group <= 8
            and num_reqs * num_kv_heads >= num_sms * 7 // 8
            and gluon_ok
        ):
            gluon, target = True, 0
    elif head_dim >= 256:
        block_n, num_warps, num_stages = 64, 8, 2
    elif (
        head_dim == 128
        and block_m == 32
        and (
            kv_fp8
            or (
                _gluon_widens_bf16(block_q, group, pairs, target, est_span) and gluon_ok
            )
        )
    ):
        # fp8 cache, 32-row tiles: twice the queries per tile (the extra rows
        # are masked), so that the dots run as warpgroup MMAs from shared
        # memory, where the converted K and V tiles are stored once instead
        # of being rearranged in registers. 11-12% faster at the three
        # 32-row shapes despite twice the MMA work.
        block_q *= 2
        block_m = _tile_rows(block_q, group)
        block_n, num_warps, num_stages, asm = 64, 4, 3, True
        persistent = 2
        # On Hopper, the warp-specialized Gluon kernel over the same 64-row
        # tiles: 9.5-11.5% faster than the Triton kernel at these three
        # shapes; run there with 1 to 8 query heads per KV head. bf16
        # caches, copied straight into its MMA buffers, were 3-12% faster
        # too; they take the widened tiles only where the Gluon kernel then
        # runs them (the widened Triton kernel was measured with fp8 caches
        # only).
        gluon = block_q * group == 64 and group <= 8 and gluon_ok
        # The Gluon kernel then keeps the tile's 32 rows of queries in half
        # of each thread's rows and runs the softmax on those alone: 4-5%
        # faster at fp8 shapes 1 and 3, as fast with bf16 caches.
        half_rows = gluon
    elif head_dim >= 128:
        block_n, num_warps, num_stages = 128, 4 if block_m <= 32 else 8, 2
        # 2 resident programs per SM streaming items beat one program per
        # item (1 and 3 per SM were slower).
        persistent = 2 if block_m <= 32 else 0
    elif block_m <= 16:
        # One warp per program: a 16-row tile then needs no softmax across
        # warps (4 warps split its keys and reduce through shared memory).
        # 14% faster than the 4-warp tiles at shape 5, bf16 and fp8 alike.
        block_n, num_warps, num_stages, asm = 32, 1, 3, True
        # fp8 caches: at most 168 registers per thread (202 uncapped), so
        # that 12 of these one-warp programs fit on an SM instead of 10: 12%
        # faster at fp8 shape 5. With a bf16 cache the plan uses all 255
        # registers, and capped it was 21-24% slower. D = 64 only: at D = 32
        # the plan needs 128-148 registers, and capped at 168 ptxas gave one
        # plan more than uncapped (fewer warps per SM).
        if kv_fp8 and head_dim == 64:
            # Up to 8 rows (8 queries x 1 head, say): both dots transposed,
            # the keys as their rows, so that the tile carries no padding
            # rows, and one split (16% faster at fp8 shape 5; 24% slower
            # with a bf16 cache, which keeps rows). Since V's float16 tile
            # goes through the kernel's asm copy (V_ASM_COPY) the transposed
            # plan needs no register cap (3% faster without).
            if block_q * group <= 8:
                transposed = True
            else:
                max_registers = 168
    elif block_m <= 32:
        block_n, num_warps, num_stages, asm = (
            (128, 4, 3, True) if kv_fp8 else (64, 4, 4, True)
        )
    else:
        block_n, num_warps, num_stages = 128, 8, 3

    # Enough programs to fill the GPU, but keep each split at least a few key
    # tiles long (estimated from static bounds).
    # At D <= 64 with up to 32 rows per tile, two splits even when the items
    # alone fill the GPU: 15% faster (bf16) and 11% (fp8) at shape 5.
    # The one-warp tiles of up to 16 rows split in two with an fp8 cache
    # only (one split is 4% faster with bf16, 13% slower with fp8), and not
    # when transposed (one split 8% faster).
    min_splits = 2 if head_dim <= 64 and block_m <= 32 else 1
    if block_m <= 16 and (not kv_fp8 or transposed):
        min_splits = 1
    splits = 1
    while (
        (pairs * splits < target or splits < min_splits)
        and est_span // (splits * 2) >= 4 * block_n
        and splits < 64
    ):
        splits *= 2
    # Inline PTX exists on NVIDIA GPUs only (not on ROCm builds of torch); the
    # persistent grid was tuned on NVIDIA only and needs a single split.
    if splits > 1 or not on_cuda or not nvidia:
        persistent = 0
    # Tiles of fewer than 64 rows run their dots on mma.sync, where the
    # kernel passes V's float16 tile through an asm copy on NVIDIA GPUs
    # (V_ASM_COPY) and float16 dots then beat tiles in q's dtype at D > 64
    # too: 11% at D = 256 with 32-row tiles, 14% at D = 128 with 16-row
    # tiles (64 and 128 requests x 8 KV heads, 4096-key windows).
    fp8_f16_dot = kv_fp8 and (
        head_dim <= 64 or (block_m < 64 and nvidia) or (gluon and splits == 1)
    )
    fp8_scores = scores_ok and gluon and splits == 1 and fp8_f16_dot
    return LaunchPlan(
        block_q=block_q,
        block_n=block_n,
        num_splits=splits,
        num_warps=num_warps,
        num_stages=num_stages,
        asm_page_load=asm and nvidia,
        programs_per_sm=persistent,
        # float16 dots: 11% faster at D = 64 and 13-17% slower at the four
        # D = 128 shapes in the Triton kernel (64- and 128-row tiles,
        # warpgroup MMAs); the Gluon kernel's loader, converting 8 values
        # per thread, gains 5% from them at shapes 1-4.
        fp8_f16_dot=fp8_f16_dot,
        gluon=gluon and splits == 1,
        # fp8 scores: 8-9% less time at fp8 shapes 1-3, 7% at shape 4;
        # DSpark's acceptance with an fp8 cache unchanged (3.407 against
        # 3.405 tokens per draft with float16 scores, 160 prompts).
        fp8_scores=fp8_scores,
        max_registers=max_registers,
        transposed=transposed,
        half_rows=half_rows and gluon and splits == 1,
        # 128-key tiles at 128 rows: against 64-key ones, 8% less time with
        # 4096-key windows (fp8 shape 4: 76.6 -> 71.0 us), 10% with 4112
        # keys of full attention, 5% at 3072, as fast at 2048 (3% faster
        # with two items per program), 4% slower at 1536, 4-10% at 1024,
        # 18% at 512 (32 and 64 requests x 4 KV heads, 16 queries x 8
        # heads).
        wide_tiles=fp8_scores and block_m == 128 and est_span >= 2048,
    )


def uniform_batch_plan(
    shape: tuple[int, int, int, int | None, int, int, int],
    *,
    device: torch.device,
    num_sms: int | None = None,
    page_size: int = 16,
    kv_fp8: bool = False,
) -> LaunchPlan:
    """:func:`plan_launch`'s plan for ``R`` requests of ``L`` cached tokens and
    ``B`` draft tokens each, ``shape = (R, L, B, W, nH, nKV, D)`` (the form
    of the benchmark shapes; ``W = None``: full attention), with a block
    table just long enough for ``L + B`` positions (``kv_fp8``: fp8 caches)."""
    reqs, ctx, block, window, heads, kv_heads, head_dim = shape
    return plan_launch(
        num_tokens=reqs * block,
        num_reqs=reqs,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        sliding_window=window,
        max_kv_len=-(-(ctx + block) // page_size) * page_size,
        device=device,
        num_sms=num_sms,
        kv_fp8=kv_fp8,
    )


def kernel_constants(
    plan: LaunchPlan,
    *,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    page_size: int,
    has_window: bool,
    kv_fp8: bool,
    k_scale_in_memory: bool,
    v_scale_in_memory: bool,
    inline_ptx: bool = True,
    v_pages: bool = False,
) -> dict[str, int | bool]:
    """The compile-time arguments of :func:`fixed_history_kernel` for ``plan``
    (also used to compile it ahead of time, ``ops.fixed_history_codegen``).
    ``inline_ptx``: whether the kernel may use inline PTX (an NVIDIA GPU, not
    the interpreter); ``v_pages``: V's pages are held transposed."""
    group = num_heads // num_kv_heads
    return dict(
        NUM_Q_HEADS=num_heads,
        NUM_KV_HEADS=num_kv_heads,
        GROUP=group,
        HEAD_DIM=head_dim,
        PAGE_SIZE=page_size,
        BLOCK_Q=plan.block_q,
        BLOCK_M=plan.tile_rows(group),
        BLOCK_N=plan.block_n,
        NUM_SPLITS=plan.num_splits,
        HAS_WINDOW=has_window,
        ASM_PAGE_LOAD=plan.asm_page_load and inline_ptx,
        PERSISTENT=bool(plan.programs_per_sm),
        KV_FP8=kv_fp8,
        FP8_F16_DOT=kv_fp8 and plan.fp8_f16_dot,
        FP8_E4M3_DOT=kv_fp8 and plan.fp8_e4m3_dot,
        K_SCALE_IN_MEMORY=k_scale_in_memory,
        V_SCALE_IN_MEMORY=v_scale_in_memory,
        TRANSPOSED=plan.transposed,
        # Tiles of 64 rows and more run on warpgroup MMAs, which read V from
        # shared memory as it is; the copy is for mma.sync's register operands.
        V_ASM_COPY=(
            kv_fp8 and plan.fp8_f16_dot and inline_ptx and plan.tile_rows(group) < 64
        ),
        V_PAGES=v_pages,
    )


@functools.cache
def _announce(
    kernel: str,
    rows: int,
    kv_fp8: bool,
    *,
    tma: bool = False,
    fp8_scores: bool = False,
    half_rows: bool = False,
    wide_tiles: bool = False,
    v_pages: bool = False,
    splits: int = 1,
) -> None:
    """Log once per process and kind of launch which kernel runs it (at INFO,
    vLLM's level): where several kernels can serve one model, the log says
    which ones did. The Gluon kernel's line names the switches of its
    pipeline that are on (``_gluon_pipeline``) and keys per tile where they
    are not 64, the Triton kernel's its key splits. Cached by its
    arguments: a launch pays a lookup."""
    if kernel == "Gluon":
        pipeline = _gluon_pipeline(
            rows,
            kv_fp8=kv_fp8,
            tma=tma,
            fp8_scores=fp8_scores,
            half_rows=half_rows,
            wide_tiles=wide_tiles,
            v_pages=v_pages,
        )
        options = sorted(k for k, v in pipeline.items() if v is True)
        if "block_n" in pipeline:
            options.append(f"{pipeline['block_n']}-key tiles")
    else:
        noun = "key split" if splits == 1 else "key splits"
        options = [f"{splits} {noun}"] + ["V pages transposed"] * v_pages
    logging.getLogger("vllm.spark2_5_plugin.ops").info(
        "fixed-history attention: %s kernel, %d-row tiles, %s cache%s",
        kernel,
        rows,
        "fp8" if kv_fp8 else "16-bit",
        f" ({', '.join(options)})" if options else "",
    )


def gluon_options(
    q: torch.Tensor,
    kv: PagedKV,
    plan: LaunchPlan,
    *,
    own_plan: bool = True,
    out: torch.Tensor | None = None,
) -> dict | None:
    """The Gluon kernel's keyword arguments where it runs this launch, else
    ``None`` (the Triton kernel runs it): the plan asks for it, its tiles
    have 64 or 128 rows and the head dim is 64 or 128 (those of its GPU
    tests), q and ``out`` (where given) are dense along the head dim (the
    Gluon kernel reads and writes rows of D contiguous values; the Triton
    kernel takes any strides), an fp8 cache's scales are tensors, and the
    device runs it (already known for a plan of :func:`plan_launch`,
    ``own_plan``). The pipeline is ``_gluon_pipeline``'s for the tile and
    the caches; with ``plan.fp8_scores`` and an fp8 cache that TMA copies,
    ``fp8_scores`` (q rounded to e4m3 row by row), and with
    ``plan.wide_tiles`` too at 128 rows, 128-key tiles; with
    ``plan.half_rows`` and 64-row tiles, ``half_rows`` (``block_q // 2``
    queries per tile)."""
    k_cache, v_cache, scales = kv.k_cache, kv.v_cache, kv.scales
    num_heads, head_dim = q.shape[1], q.shape[2]
    rows = plan.block_q * (num_heads // k_cache.shape[2])
    if not (
        plan.gluon
        and rows in (64, 128)
        and head_dim in (64, 128)
        and q.stride(2) == 1
        and (out is None or out.stride(2) == 1)
        and (scales is None or all(isinstance(x, torch.Tensor) for x in scales))
        and (own_plan or gluon_supported(q.device))
    ):
        return None
    kv_fp8, tma = scales is not None, _tma_copyable(q, k_cache, v_cache)
    pipeline = _gluon_pipeline(
        rows,
        kv_fp8=kv_fp8,
        tma=tma,
        fp8_scores=plan.fp8_scores,
        half_rows=plan.half_rows,
        wide_tiles=plan.wide_tiles,
        v_pages=kv.v_pages,
    )
    if kv.v_pages and not pipeline.get("v_pages"):
        return None
    return dict(f16_dots=plan.fp8_f16_dot, rows=rows, **pipeline)


def launch_kernel(
    q: torch.Tensor,
    kv: PagedKV,
    window: int | None,
    scale: float,
    out: torch.Tensor,
    plan: LaunchPlan | None = None,
) -> torch.Tensor:
    """Run the kernels with ``plan`` (``None``: the one :func:`plan_launch`
    picks for these shapes) and return ``out``; the arguments must already have
    passed ``fixed_history_attention``'s checks (``window``: ``None`` or > 0)."""
    k_cache, v_cache, block_table, context_lens, query_start_loc, scales = kv[:6]
    num_tokens, num_heads, head_dim = q.shape
    _, page_size, num_kv_heads, _ = k_cache.shape
    num_reqs = context_lens.shape[0]
    if num_tokens == 0 or num_reqs == 0 or num_heads == 0:
        return out
    own_plan = plan is None  # then plan.gluon already means gluon_supported
    if own_plan:
        plan = plan_launch(
            num_tokens=num_tokens,
            num_reqs=num_reqs,
            num_heads=num_heads,
            num_kv_heads=num_kv_heads,
            head_dim=head_dim,
            sliding_window=window,
            max_kv_len=block_table.shape[1] * page_size,
            device=q.device,
            kv_fp8=scales is not None,
        )
    splits = plan.num_splits
    num_items = num_reqs * num_kv_heads * splits
    if num_items > _MAX_ITEMS:
        raise ValueError(
            f"{num_reqs} requests x {num_kv_heads} KV heads x {splits} splits "
            f"exceed {_MAX_ITEMS} work items per launch; split the batch"
        )
    options = gluon_options(q, kv, plan, own_plan=own_plan, out=out)
    if options is not None:
        from vllm_spark2_5_plugin.ops.fixed_history_gluon import (
            fixed_history_attention_wgmma,
        )

        k_scale, v_scale = (None, None) if scales is None else scales
        _announce(
            "Gluon",
            options["rows"],
            scales is not None,
            tma=options.get("tma", False),
            fp8_scores=plan.fp8_scores,
            half_rows=plan.half_rows,
            wide_tiles=plan.wide_tiles,
            v_pages=kv.v_pages,
        )
        return fixed_history_attention_wgmma(
            *(q, k_cache, v_cache, block_table, context_lens, query_start_loc),
            *(window, scale, out, k_scale, v_scale),
            **options,
        )
    _announce(
        "Triton",
        plan.tile_rows(num_heads // num_kv_heads),
        scales is not None,
        v_pages=kv.v_pages,
        splits=splits,
    )
    programs = num_items
    if plan.programs_per_sm:
        # From shapes and the cached SM count only: stays graph-capturable.
        programs = min(num_items, plan.programs_per_sm * sm_count(q.device))
    if splits > 1:
        part_acc = torch.empty(
            (num_tokens, num_heads, splits, head_dim),
            dtype=torch.float32,
            device=q.device,
        )
        part_max = torch.empty(
            (num_tokens, num_heads, splits), dtype=torch.float32, device=q.device
        )
        part_sum = torch.empty_like(part_max)
    else:
        part_acc = part_max = part_sum = out  # unused by the kernel
    # fp8 caches: the scales, tensors (read on the device) or floats; else
    # placeholders the kernel never reads.
    k_scale, v_scale = (1.0, 1.0) if scales is None else scales

    fixed_history_kernel[(programs,)](
        q,
        k_cache,
        v_cache,
        out,
        part_acc,
        part_max,
        part_sum,
        block_table,
        context_lens,
        query_start_loc,
        scale * _LOG2E,
        k_scale,
        v_scale,
        window if window is not None else 0,
        num_reqs,
        *q.stride(),
        *k_cache.stride()[:3],
        *v_cache.stride()[:3],
        *out.stride(),
        block_table.stride(0),
        **kernel_constants(
            plan,
            num_heads=num_heads,
            num_kv_heads=num_kv_heads,
            head_dim=head_dim,
            page_size=page_size,
            has_window=window is not None,
            kv_fp8=scales is not None,
            k_scale_in_memory=isinstance(k_scale, torch.Tensor),
            v_scale_in_memory=isinstance(v_scale, torch.Tensor),
            # Neither the interpreter nor a ROCm GPU runs inline PTX.
            inline_ptx=not interpreting() and torch.version.hip is None,
            v_pages=kv.v_pages,
        ),
        **compile_options(plan),
    )
    if splits > 1:
        combine_splits_kernel[(num_tokens, num_heads)](
            out,
            part_acc,
            part_max,
            part_sum,
            query_start_loc,
            num_reqs,
            *out.stride(),
            NUM_Q_HEADS=num_heads,
            HEAD_DIM=head_dim,
            NUM_SPLITS=splits,
            num_warps=4 if head_dim * splits >= 1024 else 2,
        )
    return out
