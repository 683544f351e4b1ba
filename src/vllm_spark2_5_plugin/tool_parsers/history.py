# SPDX-License-Identifier: Apache-2.0
"""Chat history the Spark2_5 template cannot render faithfully is refused.

A message of a role the template does not render is refused before any
template runs: :func:`refuse_unrenderable_roles` answers 400 naming it (the
bundled template refuses it too where it is rendered without vLLM; a template
that only skips unknown roles would leave the message out of the prompt).

The template writes an assistant's earlier tool call as ``<arg_key>`` /
``<arg_value>`` pairs, so its ``arguments`` must be a JSON object. vLLM 0.32.0
turns any other ``arguments`` string (``"not json"``, ``"[1,2]"``) into ``{}``
before the template runs, which would show the model a call without its
arguments. :func:`refuse_unrenderable_tool_calls` runs before that, on the
request's messages as sent, and answers 400 naming the message instead.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from vllm.exceptions import VLLMValidationError

from vllm_spark2_5_plugin.names import MODEL_TYPE


def _get(item: Any, key: str) -> Any:
    return item.get(key) if isinstance(item, dict) else getattr(item, key, None)


def _refuse_constant(name: str) -> Any:
    # Python's json reads NaN and Infinity, which JSON does not have (the
    # template would write them back into the prompt as they are).
    raise ValueError(f"{name} is not a JSON value")


def _not_an_object(arguments: Any) -> str | None:
    """Why ``arguments`` cannot be rendered as key/value pairs, or ``None``."""
    if arguments is None or isinstance(arguments, dict):
        return None
    if not isinstance(arguments, str):
        return f"a {type(arguments).__name__}"
    if not arguments.strip():
        return None  # no arguments, rendered as none
    try:
        parsed = json.loads(arguments, parse_constant=_refuse_constant)
    except json.JSONDecodeError:
        return "not valid JSON"
    except ValueError as exc:  # a number past Python's digit limit
        return f"not readable: {exc}"
    except RecursionError:
        return "nested too deeply to read"
    if isinstance(parsed, dict):
        return None
    return f"JSON of type {type(parsed).__name__}"


def refuse_unrenderable_tool_calls(messages: Sequence[Any]) -> None:
    """Raise ``VLLMValidationError`` (HTTP 400) for the first assistant tool
    call whose ``arguments`` is not a JSON object, naming its message index."""
    for index, message in enumerate(messages):
        if _get(message, "role") != "assistant":
            continue
        calls = _get(message, "tool_calls")
        if not isinstance(calls, list):
            continue  # vLLM itself refuses malformed tool_calls
        for call in calls:
            function = _get(call, "function")
            if function is None:
                continue
            why = _not_an_object(_get(function, "arguments"))
            if why is not None:
                name = json.dumps(_get(function, "name"))
                raise VLLMValidationError(
                    f"message {index}: the arguments of tool call {name} are not "
                    f"a JSON object ({why}); the Spark2_5 chat template writes "
                    "arguments as key/value pairs, so send them as a JSON object "
                    'string such as "{}"',
                    parameter="messages",
                )


#: The roles the chat template renders ("developer" as a system turn).
RENDERED_ROLES = ("system", "developer", "user", "assistant", "tool")


def refuse_unrenderable_roles(messages: Sequence[Any]) -> None:
    """Raise ``VLLMValidationError`` (HTTP 400) for the first message whose
    role the Spark2_5 template does not render, naming the message and the
    roles it does."""
    for index, message in enumerate(messages):
        role = _get(message, "role")
        if role not in RENDERED_ROLES:
            raise VLLMValidationError(
                f"message {index}: role {role!r} is not one the Spark2_5 chat "
                f"template renders ({', '.join(RENDERED_ROLES)}); send it as "
                "one of these",
                parameter="messages",
            )


def check_spark2_5_history(messages: Sequence[Any], model_config: Any) -> None:
    """:func:`refuse_unrenderable_roles` and
    :func:`refuse_unrenderable_tool_calls` for Spark2_5 models only (the
    plugin is loaded for every model vLLM serves)."""
    hf_config = getattr(model_config, "hf_config", None)
    if getattr(hf_config, "model_type", None) == MODEL_TYPE:
        refuse_unrenderable_roles(messages)
        refuse_unrenderable_tool_calls(messages)
