# SPDX-License-Identifier: Apache-2.0
"""The names Spark2_5 is known by: one home for every fixed string.

Checkpoint vocabulary (model type, layer types, draft prefixes, DSpark field
aliases), the names vLLM registers (architectures, tool parser, plugin), and
the tokens of the tool-call format. Pure data: importing this module imports
nothing, so the plugin entry point, the models, the tool parser, the
references and the tooling can all take their names from here.
"""

from __future__ import annotations

#: Name used in every log line of the plugin.
PLUGIN_NAME = "vllm-spark2_5-plugin"
#: Environment switch that makes the plugin replace an in-tree Spark2_5.
OVERRIDE_ENV = "SPARK2_5_PLUGIN_OVERRIDE"

# -- what vLLM knows the models by ---------------------------------------------

MODEL_TYPE = "spark2_5"
TARGET_ARCH = "Spark2_5ForCausalLM"
DRAFT_ARCH = "Spark2_5DSparkForCausalLM"
#: ``--tool-call-parser`` name (not ``spark2_5``: that is the model type).
TOOL_PARSER_NAME = "spark25"
#: ``--speculative-config`` method that runs the draft.
DSPARK_METHOD = "dspark"

# -- layer types -----------------------------------------------------------------

SLIDING = "sliding_attention"
FULL = "full_attention"
LAYER_TYPES = (SLIDING, FULL)

# -- DSpark checkpoint vocabulary -----------------------------------------------

#: Prefixes under which draft tensors ship inside a target checkpoint; exactly
#: one of them is used by a given checkpoint.
DRAFT_WEIGHT_PREFIXES = ("draft_model.", "mtp.", "model.mtp.")

#: Canonical ``config.json`` field -> the alias that is also accepted.
DSPARK_ALIASES: dict[str, str] = {
    "dspark_block_size": "block_size",
    "dspark_markov_rank": "markov_rank",
    "dspark_target_layer_ids": "target_layer_ids",
    "dspark_markov_head_type": "markov_head_type",
    "dspark_enable_confidence_head": "enable_confidence_head",
    "dspark_noise_token_id": "mask_token_id",
}

#: Every ``config.json`` field that configures the DSpark draft, aliases
#: included.
DSPARK_FIELDS = (
    *DSPARK_ALIASES,
    *DSPARK_ALIASES.values(),
    "dspark_layer_types",
    "dspark_sliding_window",
    "draft_vocab_size",
)

#: Target ``config.json`` fields the DSpark draft's layers take as they are:
#: the attention shape, norms, activation and RoPE (the MLP also shares
#: ``intermediate_size``).
DRAFT_SHARED_FIELDS = (
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "hidden_act",
    "rms_norm_eps",
    "attention_bias",
    "attention_output_gate",
    "rope_parameters",
)

MARKOV_HEAD_TYPES = ("vanilla", "rnn")

# -- turns ------------------------------------------------------------------------

END_OF_TEXT = "<|endoftext|>"
#: Role tokens: each starts a turn, so each also ends the one before.
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>", "<|observation|>")
#: What ends an assistant turn (the checkpoint's end-of-sequence ids).
TURN_END_TOKENS = (END_OF_TEXT, *ROLE_TOKENS)

# -- the tool-call format ---------------------------------------------------------

TOOL_CALL_START = "<tool_call>"
TOOL_CALL_END = "</tool_call>"
ARG_KEY_START = "<arg_key>"
ARG_KEY_END = "</arg_key>"
ARG_VALUE_START = "<arg_value>"
ARG_VALUE_END = "</arg_value>"
#: The six tags a call is written with (the parser's alphabet).
STRUCTURAL_TAGS = (
    TOOL_CALL_START,
    TOOL_CALL_END,
    ARG_KEY_START,
    ARG_KEY_END,
    ARG_VALUE_START,
    ARG_VALUE_END,
)
TOOL_RESPONSE_START = "<tool_response>"
TOOL_RESPONSE_END = "</tool_response>"
#: Every tag of the format, each one special token of the Spark2_5 tokenizer.
TOOL_TOKENS = (*STRUCTURAL_TAGS, TOOL_RESPONSE_START, TOOL_RESPONSE_END)
