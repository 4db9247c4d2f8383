"""The router: a pure decision function for routed plans (state in, decision out).

It assembles prompts from the packaged prompt files, parses replies strictly, summarizes
observations, checks and routes the final answer, evaluates supervisor rules and parses the
judge's verdict. It never runs a tool, writes the journal, calls a provider or owns a clock:
the engine's routed runner does all of that and consults the router between steps.
"""

from .._lazy import lazy_names

#: public name -> the submodule that holds it, loaded on first use (so importing one submodule,
#: such as ``supervisor`` for the plan model's rule kinds, loads only that one)
_WHERE = {
    "Budgets": "views",
    "Decision": "decisions",
    "ENGINE_OUTCOMES": "closeout",
    "Hit": "supervisor",
    "LoopView": "views",
    "Malformed": "views",
    "Message": "views",
    "Observation": "views",
    "PromptError": "prompts",
    "Prompts": "prompts",
    "REJECTION_KINDS": "observations",
    "RouterPrompt": "decisions",
    "Rule": "supervisor",
    "SUMMARY_CHARS": "observations",
    "Step": "views",
    "SupervisorState": "supervisor",
    "ToolView": "views",
    "Trajectory": "views",
    "Usage": "views",
    "Verdict": "judge",
    "check_final": "closeout",
    "check_rules": "supervisor",
    "final_messages": "closeout",
    "judge_messages": "judge",
    "observe_masked": "observations",
    "observe_receipt": "observations",
    "observe_rejection": "observations",
    "observe_withheld": "observations",
    "packaged_prompts": "prompts",
    "parse_decision": "decisions",
    "parse_verdict": "judge",
    "read_app_file": "prompts",
    "read_prompts": "prompts",
    "repair_messages": "closeout",
    "route_of": "closeout",
    "router_messages": "decisions",
}

__all__ = sorted(_WHERE)


__getattr__ = lazy_names(__name__, _WHERE, globals())
