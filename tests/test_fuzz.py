"""Property-based: generated registries, plans and lane streams (hostile and careless alike) give
findings or an admitted plan, never an unexpected exception; every finding is placed, clipped and
escaped. A bounded, derandomized number of examples keeps the suite fast and repeatable; the
long campaign is ``scripts/fuzz_campaign.py``."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fuzzing

BOUNDED = settings(max_examples=200, deadline=None, derandomize=True, database=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("fuzz")
    fuzzing.write_base(path)
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
