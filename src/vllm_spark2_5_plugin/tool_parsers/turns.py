# SPDX-License-Identifier: Apache-2.0
"""Where an assistant turn ends: the turn-ending tokens and a streaming cutter.

An assistant turn of a Spark2_5 model ends at ``<|endoftext|>`` or at a role
token (``<|system|>``, ``<|user|>``, ``<|assistant|>``, ``<|observation|>``):
what follows belongs to another turn. The checkpoint's generation config
lists these ids as end-of-sequence ids, so vLLM normally stops there and the
token never reaches the text. A request can still see one in its text (with
``ignore_eos``, with ``include_stop_str_in_output``, or on a server started
with ``--generation-config vllm``, all while ``skip_special_tokens`` is off,
which the parser's ``adjust_request`` does for requests with tools).
:class:`TurnCutter` then ends the output at the first such token, in both
modes: the token and everything after it are neither content nor calls.

Pure Python (no vLLM); the tokens are in :mod:`vllm_spark2_5_plugin.names`.
"""

from __future__ import annotations

from vllm_spark2_5_plugin.names import TURN_END_TOKENS


def _partial_suffix_len(text: str) -> int:
    """Length of the longest suffix of ``text`` that begins a turn-end token."""
    best = 0
    for token in TURN_END_TOKENS:
        for n in range(min(len(token) - 1, len(text)), best, -1):
            if text.endswith(token[:n]):
                best = n
                break
    return best


def cut_at_turn_end(text: str) -> str:
    """``text`` up to (not including) the first turn-ending token."""
    found = [pos for token in TURN_END_TOKENS if (pos := text.find(token)) != -1]
    return text[: min(found)] if found else text


class TurnCutter:
    """Streams text up to the first turn-ending token, whatever the chunking.

    ``feed`` returns the text that is surely before the end of the turn; text
    that may be the start of a turn-ending token (at most 14 characters) is
    held back until it is decided, and ``finish`` returns what is still held.
    The concatenated returns equal :func:`cut_at_turn_end` of the whole text.
    """

    def __init__(self) -> None:
        self._held = ""
        self.ended = False

    def feed(self, delta: str) -> str:
        if self.ended:
            return ""
        text = self._held + delta
        cut = cut_at_turn_end(text)
        if len(cut) < len(text):
            self.ended = True
            self._held = ""
            return cut
        keep = _partial_suffix_len(text)
        self._held = text[len(text) - keep :]
        return text[: len(text) - keep]

    def finish(self) -> str:
        text, self._held = self._held, ""
        return text
