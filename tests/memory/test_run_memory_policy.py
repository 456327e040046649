"""RunMemoryPolicy: defaults, parsing and the spec §3.1 validation rules (pure, no database)."""

import pytest

from memory.run_memory_policy import PolicyValidationError, RunMemoryPolicy

SPEC_DEFAULTS = {
    "enabled": True,
    "retention_ms": 2592000000,
    "max_tracked_per_session": 32,
    "max_prompt_entries": 3,
    "redact_pii": True,
    "search_visibility": "session_only",
}


def _error(data) -> PolicyValidationError:
    with pytest.raises(PolicyValidationError) as caught:
        RunMemoryPolicy.from_dict(data)
    return caught.value


def test_defaults_match_the_spec():
    assert RunMemoryPolicy().to_dict() == SPEC_DEFAULTS
    assert list(RunMemoryPolicy().to_dict()) == list(SPEC_DEFAULTS)
    RunMemoryPolicy().validate()


def test_missing_fields_take_defaults():
    assert RunMemoryPolicy.from_dict({}) == RunMemoryPolicy()
    policy = RunMemoryPolicy.from_dict({"max_prompt_entries": 5, "search_visibility": "learning_scopes"})
    assert policy.to_dict() == {
        **SPEC_DEFAULTS,
        "max_prompt_entries": 5,
        "search_visibility": "learning_scopes",
    }


def test_round_trip():
    policy = RunMemoryPolicy(
        enabled=True,
        retention_ms=1,
        max_tracked_per_session=7,
        max_prompt_entries=7,
        redact_pii=False,
        search_visibility="learning_scopes",
    )
    assert RunMemoryPolicy.from_dict(policy.to_dict()) == policy


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        (
            {"retention_ms": 0},
            "retention_ms",
            "run memory retention_ms must be greater than zero when enabled",
        ),
        (
            {"max_tracked_per_session": 0, "max_prompt_entries": 0},
            "max_tracked_per_session",
            "run memory max_tracked_per_session must be greater than zero when enabled",
        ),
        (
            {"max_prompt_entries": 0},
            "max_prompt_entries",
            "run memory max_prompt_entries must be greater than zero when enabled",
        ),
        (
            {"max_prompt_entries": 33},
            "max_prompt_entries",
            "run memory max_prompt_entries must be lower than or equal to max_tracked_per_session",
        ),
        (
            {"enabled": False, "max_tracked_per_session": 0},
            "max_prompt_entries",
            "run memory max_prompt_entries must be lower than or equal to max_tracked_per_session",
        ),
    ],
)
def test_spec_rules_have_literal_messages_and_fields(changes, field, message):
    error = _error({**SPEC_DEFAULTS, **changes})
    assert (error.field, error.message, str(error)) == (field, message, message)
    with pytest.raises(PolicyValidationError) as caught:
        RunMemoryPolicy(**{**SPEC_DEFAULTS, **changes}).validate()
    assert (caught.value.field, caught.value.message) == (field, message)


def test_rules_are_checked_in_spec_order():
    error = _error({"retention_ms": 0, "max_tracked_per_session": 0, "max_prompt_entries": 0})
    assert error.field == "retention_ms"


def test_all_zeros_are_valid_only_when_disabled():
    zeros = {**SPEC_DEFAULTS, "retention_ms": 0, "max_tracked_per_session": 0, "max_prompt_entries": 0}
    policy = RunMemoryPolicy.from_dict({**zeros, "enabled": False})
    assert policy.enabled is False
    assert (policy.retention_ms, policy.max_tracked_per_session, policy.max_prompt_entries) == (0, 0, 0)
    # the near miss: the same zeros with the policy enabled are refused, naming the first rule's field
    assert _error({**zeros, "enabled": True}).field == "retention_ms"


def test_prompt_entries_may_equal_tracked_but_not_exceed_it():
    policy = RunMemoryPolicy.from_dict({"max_tracked_per_session": 3, "max_prompt_entries": 3})
    assert (policy.max_tracked_per_session, policy.max_prompt_entries) == (3, 3)
    error = _error({"max_tracked_per_session": 3, "max_prompt_entries": 4})
    assert (error.field, error.message) == (
        "max_prompt_entries",
        "run memory max_prompt_entries must be lower than or equal to max_tracked_per_session",
    )


def test_unknown_field_is_rejected():
    error = _error({**SPEC_DEFAULTS, "retention_days": 30})
    assert error.field == "retention_days"
    assert "unknown field `retention_days`" in error.message


@pytest.mark.parametrize("data", [None, [], "enabled", 3])
def test_non_object_is_rejected(data):
    error = _error(data)
    assert error.field is None
    assert error.message == "run memory policy must be a JSON object"


@pytest.mark.parametrize("field", ["retention_ms", "max_tracked_per_session", "max_prompt_entries"])
@pytest.mark.parametrize("value", [True, False, -1, 1.0, "3", None, 2**63])
def test_integer_fields_reject_wrong_types(field, value):
    error = _error({field: value})
    assert error.field == field
    assert error.message.startswith(f"run memory {field} must be an integer")


@pytest.mark.parametrize("field", ["enabled", "redact_pii"])
@pytest.mark.parametrize("value", [1, 0, "true", None])
def test_boolean_fields_reject_wrong_types(field, value):
    error = _error({field: value})
    assert (error.field, error.message) == (field, f"run memory {field} must be a boolean")


@pytest.mark.parametrize("value", ["everywhere", "SESSION_ONLY", "", None, 1])
def test_search_visibility_rejects_unknown_values(value):
    error = _error({"search_visibility": value})
    assert error.field == "search_visibility"
    assert error.message == "run memory search_visibility must be one of session_only, learning_scopes, workspace"


def test_error_is_a_value_error():
    assert issubclass(PolicyValidationError, ValueError)


def test_expiry_follows_retention_and_enabled():
    policy = RunMemoryPolicy(retention_ms=100)
    assert not policy.is_expired(1_000, 1_100)
    assert policy.is_expired(1_000, 1_101)
    assert not policy.is_expired(2_000, 1_000)  # recorded "in the future": clock skew never expires a record
    assert RunMemoryPolicy(enabled=False).is_expired(1_000, 1_000)
