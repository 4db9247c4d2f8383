"""Property-based: generated registries, plans and lane streams (hostile and careless alike) give
findings or an admitted plan, never an unexpected exception; every finding is placed, clipped and
escaped. Paths in registries and plans that no file system takes, or that name a pipe, a device or
a folder, are findings too. Model replies (decisions, final answers, judge verdicts) come out as a
value every later step can hash, journal and show, or a rejection that is text; a routed run fed
them ends with an outcome and a journal that reads back. A bounded, derandomized number of
examples keeps the suite fast and repeatable; the long campaign is ``scripts/fuzz_campaign.py``."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fuzzing
import fuzzing_replies

BOUNDED = settings(max_examples=200, deadline=None, derandomize=True, database=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("fuzz")
    fuzzing.write_base(path)
    fuzzing.write_paths_base(path)
    return path


@BOUNDED
@given(fuzzing.registries)
def test_generated_registries_give_findings_not_exceptions(folder, registry):
    fuzzing.check_registry(folder, fuzzing.to_yaml(registry) + "\n")


@BOUNDED
@given(st.text(max_size=200))
def test_arbitrary_text_as_a_registry_gives_findings(folder, text):
    fuzzing.check_registry(folder, text)


@BOUNDED
@given(fuzzing.plans)
def test_generated_plans_are_admitted_or_rejected_with_findings(folder, plan):
    fuzzing.check_plan(folder, fuzzing.plan_document(plan))


@BOUNDED
@given(fuzzing.lane_streams, st.booleans())
def test_generated_lane_streams_are_admitted_or_rejected_with_findings(folder, stream, one_at_a_time):
    fuzzing.check_plan(folder, fuzzing.stream_plan(), stream, stream=one_at_a_time)


SOME = settings(BOUNDED, max_examples=80)
FEW = settings(BOUNDED, max_examples=20)


@SOME
@given(fuzzing.path_registries)
def test_paths_in_a_registry_give_findings_not_exceptions(folder, registry):
    fuzzing.check_registry(folder, fuzzing.to_yaml(registry) + "\n")


@SOME
@given(fuzzing.path_plans)
def test_paths_in_a_plan_give_findings_not_exceptions(folder, plan):
    fuzzing.check_plan(folder, fuzzing.plan_document(plan))


@settings(BOUNDED, max_examples=150)
@given(fuzzing_replies.model_replies)
def test_model_replies_are_values_or_rejections_never_exceptions(reply):
    fuzzing_replies.check_model_reply(reply)


@FEW
@given(fuzzing_replies.routed_scripts)
def test_a_routed_run_fed_hostile_replies_ends_with_an_outcome(folder, script):
    fuzzing_replies.check_routed_run(folder, *script)
