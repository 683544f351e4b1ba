# SPDX-License-Identifier: Apache-2.0
"""The ``spark25`` tool parser (see ``docs/tool_parser.md``).

* :mod:`.values` -- type lookup, value conversion, the arguments-JSON writer;
* :mod:`.scanner` -- the call scanner state machine and its events;
* :mod:`.turns` -- where an assistant turn ends;
* :mod:`.constraints` -- the structural tag that enforces ``tool_choice``
  "required"/named and ``strict`` schemas (xgrammar's format models);
* :mod:`.history` -- the 400 for history the template cannot render;
* :mod:`.spark25` -- ``Spark25ToolParser``, the vLLM adapter.

:mod:`.spark25` and :mod:`.history` import vLLM; importing this package
imports nothing.
"""
