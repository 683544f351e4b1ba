# SPDX-License-Identifier: Apache-2.0
"""The ``spark25`` tool parser (see ``docs/tool_parser.md``).

* :mod:`.values` -- type lookup, value conversion, the arguments-JSON writer;
* :mod:`.scanner` -- the call scanner state machine and its events;
* :mod:`.spark25` -- ``Spark25ToolParser``, the vLLM adapter.

Only :mod:`.spark25` imports vLLM; importing this package imports nothing.
"""
