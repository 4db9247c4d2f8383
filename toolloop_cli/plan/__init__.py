"""Plan files and whole-plan admission."""

from .admit import AdmittedCall, AdmittedLane, AdmittedPlan, admit_plan, load_plan
from .models import PlanDecl

__all__ = ["AdmittedCall", "AdmittedLane", "AdmittedPlan", "PlanDecl", "admit_plan", "load_plan"]
