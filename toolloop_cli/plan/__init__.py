"""Plan files and whole-plan admission."""

from typing import TYPE_CHECKING

from .._lazy import lazy_names
from .admit import AdmittedCall, AdmittedLane, AdmittedPlan, admit_plan, load_plan

if TYPE_CHECKING:
    from .models import PlanDecl

__all__ = ["AdmittedCall", "AdmittedLane", "AdmittedPlan", "PlanDecl", "admit_plan", "load_plan"]

# the plan model (and pydantic) loads when asked for, not with every plan a command runs
__getattr__ = lazy_names(__name__, {"PlanDecl": "models"}, globals())
