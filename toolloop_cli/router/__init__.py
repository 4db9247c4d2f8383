"""The router: a pure decision function for routed plans (state in, decision out).

It assembles prompts from the packaged prompt files, parses replies strictly, summarizes
observations, checks and routes the final answer, evaluates supervisor rules and parses the
judge's verdict. It never runs a tool, writes the journal, calls a provider or owns a clock:
the engine's routed runner does all of that and consults the router between steps.
"""

from .closeout import ENGINE_OUTCOMES, check_final, final_messages, repair_messages, route_of
from .decisions import Decision, parse_decision, router_messages
from .judge import Verdict, judge_messages, parse_verdict
from .observations import (REJECTION_KINDS, SUMMARY_CHARS, observe_masked, observe_receipt, observe_rejection,
                           observe_withheld)
from .prompts import PromptError, Prompts, packaged_prompts, read_app_file, read_prompts
from .supervisor import Hit, Rule, SupervisorState, check_rules
from .views import Budgets, LoopView, Malformed, Message, Observation, Step, ToolView, Trajectory, Usage

__all__ = [
    "Budgets", "Decision", "ENGINE_OUTCOMES", "Hit", "LoopView", "Malformed", "Message", "Observation",
    "PromptError", "Prompts", "REJECTION_KINDS", "Rule", "SUMMARY_CHARS", "Step", "SupervisorState", "ToolView",
    "Trajectory", "Usage", "Verdict", "check_final", "check_rules", "final_messages", "judge_messages",
    "observe_masked", "observe_receipt", "observe_rejection", "observe_withheld", "packaged_prompts",
    "parse_decision", "parse_verdict", "read_app_file", "read_prompts", "repair_messages", "route_of",
    "router_messages",
]
