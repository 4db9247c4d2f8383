"""Approval gates: CEL expressions over ``args`` and ``effect``."""

from __future__ import annotations



class ApprovalUnavailable(Exception):
    pass


class ApprovalGate:
    """A compiled ``approval.when`` expression."""

    def __init__(self, text: str):
        try:
            import celpy
        except ImportError as exc:  # pragma: no cover - depends on the extra being installed
            raise ApprovalUnavailable(
                "approval expressions need the CEL extra: pip install 'toolloop-cli[approval]'"
            ) from exc
        self._celpy = celpy
        env = celpy.Environment()
        self.text = text
        self._program = env.program(env.compile(text))

    def _evaluate(self, args: dict, effect: str) -> object:
        cel = self._celpy
        try:
            return self._program.evaluate({"args": cel.json_to_cel(args), "effect": cel.json_to_cel(effect)})
        except Exception as exc:  # noqa: BLE001 - the CEL evaluator's own errors
            return exc

    def matches(self, args: dict, effect: str) -> bool:
        result = self._evaluate(args, effect)
        if isinstance(result, Exception):
            # an expression that cannot be evaluated on these args gates the call (fail closed)
            return True
        return bool(result)

    def explain(self, args: dict, effect: str) -> str | None:
        """Why the expression could not be evaluated for these arguments (the call is gated), or None."""
        result = self._evaluate(args, effect)
        if isinstance(result, Exception):
            text = str(result).strip().splitlines()[0] if str(result).strip() else type(result).__name__
            return f"the approval expression could not be evaluated ({text[:200]}), so the call waits for a person"
        return None


class RequiredGate:
    """``approval: required``: every call of the tool waits for a person."""

    text = "required"

    def matches(self, args: dict, effect: str) -> bool:
        return True


def compile_approval(text: str) -> tuple[ApprovalGate | None, str | None]:
    try:
        return ApprovalGate(text), None
    except ApprovalUnavailable as exc:
        return None, str(exc)
    except Exception as exc:  # noqa: BLE001 - the CEL parser's own error types
        from .._text import clip, error_text

        text = error_text(exc).strip()
        first = text.splitlines()[0] if text else type(exc).__name__
        return None, f"approval expression does not compile: {clip(first)}"
