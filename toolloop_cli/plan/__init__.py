"""Plan files (SPEC 3) and whole-plan admission (SPEC 4)."""

from .admit import AdmittedCall, AdmittedLane, AdmittedPlan, admit_plan, load_plan
from .models import PlanDecl

__all__ = ["AdmittedCall", "AdmittedLane", "AdmittedPlan", "PlanDecl", "admit_plan", "load_plan"]
