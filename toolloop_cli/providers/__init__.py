"""Model providers: a request in, a reply with usage out (openai, anthropic, replay, and a
scripted fake for tests). Nothing here retries, sleeps or keeps a deadline.

``PROVIDERS`` is the one table of the providers a plan's profile may name: each module brings
its ``KIND`` (a ``ProviderKind``: its factory and its profile check), loaded on first use. A
run may also be handed provider instances by name (``RunOptions.providers``): an instance
answers every profile that names it, so an in-process provider (``ScriptedProvider``, one
backed by a function) drives a real run.
"""

from __future__ import annotations

import importlib
import os
from typing import Any, Mapping

from .base import (ERROR_KINDS, ModelReply, ModelRequest, Price, Profile, ProfileAdmission, Provider, ProviderError,
                   ProviderKind, parse_retry_after, resolved)

#: provider name -> the module (in this package) whose ``KIND`` makes and checks it
PROVIDERS: dict[str, str] = {
    "openai": ".openai",
    "anthropic": ".anthropic",
    "replay": ".replay",
}

__all__ = ["ERROR_KINDS", "PROVIDERS", "ModelReply", "ModelRequest", "Price", "Profile", "ProfileAdmission",
           "Provider", "ProviderError", "ProviderKind", "check_profile", "make_provider", "make_providers",
           "parse_retry_after", "provider_kind"]


def provider_kind(name: str) -> ProviderKind:
    """The registered provider ``name``; ``ValueError`` for a name the table does not hold."""
    module = PROVIDERS.get(name)
    if module is None:
        raise ValueError(f"unknown provider {name!r} (known: {', '.join(PROVIDERS)})")
    kind: ProviderKind = importlib.import_module(module, __name__).KIND
    return kind


def check_profile(profile: Profile, at: tuple[Any, ...], admission: ProfileAdmission) -> Profile | None:
    """The checks of the provider a profile names (the name itself is checked by the caller)."""
    return provider_kind(profile.provider).check(profile, at, admission)


def make_provider(profile: Profile, *, env: Mapping[str, str], plan_dir: str | os.PathLike[str] | None = None,
                  replay_answers: Any = None, given: Mapping[str, Provider] | None = None) -> Provider:
    """The provider a profile names: an instance ``given`` under that name, else one made by its
    module. ``env`` is where API keys are read (at request time); ``plan_dir`` resolves a
    relative ``fixture``; ``replay_answers`` (a ``ReplayAnswers``) answers a replay profile
    instead of its fixture, e.g. a recorded run's answers."""
    if given is not None and profile.provider in given:
        return given[profile.provider]
    return provider_kind(profile.provider).make(profile, env=env, plan_dir=plan_dir, replay_answers=replay_answers)


def make_providers(profiles: Mapping[str, Profile], *, env: Mapping[str, str],
                   plan_dir: str | os.PathLike[str] | None = None, replay_answers: Any = None,
                   given: Mapping[str, Provider] | None = None) -> dict[str, Provider]:
    """One provider per named profile (router, final, judge). Replay profiles that name the
    same fixture share one cursor over it, so one fixture serves every profile in recorded order."""
    from .replay import ReplayAnswers

    shared: dict[str, Any] = {}
    out: dict[str, Provider] = {}
    for name, profile in profiles.items():
        answers = replay_answers
        if profile.provider == "replay" and answers is None and profile.fixture is not None:
            path = resolved(profile.fixture, plan_dir)
            if path not in shared:
                shared[path] = ReplayAnswers.from_fixture(path)
            answers = shared[path]
        out[name] = make_provider(profile, env=env, plan_dir=plan_dir, replay_answers=answers, given=given)
    return out
