"""Approval prompts on a terminal: the exact arguments, then approve, edit
(re-validated against the input schema) or reject with a message. One prompt at a time."""

from __future__ import annotations

import json
import sys
from typing import Any

import trio


class TerminalApprover:
    def __init__(self, progress: Any = None):
        self.progress = progress  # the live view, paused while a person types
        self._lock = trio.Lock()

    async def __call__(self, tool: Any, item_key: str | None, call_key: str, args: dict,
                       reason: str | None = None) -> tuple[str, Any]:
        async with self._lock:
            if self.progress is not None:
                self.progress.progress.stop()
            try:
                return await trio.to_thread.run_sync(self._ask, tool, item_key, call_key, args, reason)
            finally:
                if self.progress is not None:
                    self.progress.progress.start()

    def _ask(self, tool: Any, item_key: str | None, call_key: str, args: dict,
             reason: str | None = None) -> tuple[str, Any]:
        """``reason``: the gate is a taint's ("after untrusted content from TOOL at turn N")."""
        where = f"lane {item_key!r}, call {call_key!r}" if item_key is not None else f"call {call_key!r}"
        explain = getattr(getattr(tool, "approval", None), "explain", None)
        why = explain(args, tool.effect) if explain is not None and reason is None else None
        if why:
            self._say(f"\n{why}")
        self._say(f"\napproval needed: tool '{tool.id}' ({reason or tool.approval_text}), {where}\n"
                  f"{json.dumps(args, indent=2, ensure_ascii=False)}\n")
        while True:
            choice = self._read("[a]pprove, [e]dit, [r]eject? ")
            if choice is None:
                return "reject", "no answer: the terminal's input ended"
            choice = choice.strip().lower()
            if choice in ("a", "approve"):
                return "run", args
            if choice in ("r", "reject"):
                return "reject", (self._read("message: ") or "").strip() or "rejected by a person"
            if choice in ("e", "edit"):
                edited = self._edit(tool)
                if edited is not None:
                    return "run", edited
            else:
                self._say("answer a, e or r\n")

    def _edit(self, tool: Any) -> dict | None:
        from ..contract.schemas import schema_errors

        text = (self._read("new arguments (one line of JSON, empty to go back): ") or "").strip()
        if not text:
            return None
        from .._json import JSONDecodeError, loads

        try:
            edited = loads(text)
        except JSONDecodeError as exc:
            self._say(f"not JSON: {exc}\n")
            return None
        if not isinstance(edited, dict):
            self._say("the arguments must be a JSON object\n")
            return None
        from .._json import value_problem

        if (why := value_problem(edited)) is not None:
            self._say(f"these arguments cannot be used: {why}\n")
            return None
        if tool.input_validator is not None and not tool.input_validator.is_valid(edited):
            self._say("they fail the input schema: " + "; ".join(schema_errors(tool.input_validator, edited)) + "\n")
            return None
        return edited

    @staticmethod
    def _say(text: str) -> None:
        from .._text import escape

        # control characters in a key or a value are shown escaped; the prompt's own line breaks stay
        sys.stderr.write("\n".join(escape(line) for line in text.split("\n")))
        sys.stderr.flush()

    def _read(self, prompt: str) -> str | None:
        """A line typed at the terminal, or None when its input ended."""
        self._say(prompt)
        line = sys.stdin.readline()
        return line.rstrip("\n") if line else None
