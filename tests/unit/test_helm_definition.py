"""helm_agl.definition: parsing cozystack-shaped definitions and their acceptance."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

from helm_agl.definition import ApplicationDefinition, acceptance
from tests.unit.definition_samples import load, varied


def make(
    obj: dict[str, Any], *, name: str | None = None, created: str | None = None, **changes: Any
) -> ApplicationDefinition:
    return ApplicationDefinition.from_object(varied(obj, name=name, created=created, **changes))


def test_postgres_fixture_properties() -> None:
    d = ApplicationDefinition.from_object(load("postgres"))
    assert (d.name, d.kind, d.plural, d.singular) == ("postgres", "Postgres", "postgreses", "postgres")
    assert d.prefix == "postgres-"
    assert d.release_labels == {"sharding.fluxcd.io/key": "tenants"}
    assert d.chart_ref == {
        "kind": "ExternalArtifact",
        "name": "cozystack-postgres-application-default-postgres",
        "namespace": "cozy-system",
    }
    assert d.install_timeout == "15m"
    assert d.upgrade_timeout == "20m"
    assert d.disable_wait is False
    assert d.wait_strategy == "poller"
    assert d.health_check_exprs[0]["kind"] == "Cluster"
    assert d.schema["properties"]["replicas"]["default"] == 2
    assert d.schema is d.schema  # parsed once
    assert d.generation is None and d.creation_timestamp is None


def test_redis_fixture_defaults() -> None:
    d = ApplicationDefinition.from_object(load("redis"))
    assert d.install_timeout is None and d.upgrade_timeout is None
    assert d.disable_wait is False
    assert d.wait_strategy is None
    assert d.health_check_exprs == []


def test_upgrade_timeout_falls_back_to_install_timeout() -> None:
    obj = load("redis")
    obj["metadata"]["annotations"] = {
        "release.cozystack.io/helm-install-timeout": "15m",
        "release.cozystack.io/helm-install-disable-wait": "True",
    }
    d = ApplicationDefinition.from_object(obj)
    assert d.install_timeout == "15m" and d.upgrade_timeout == "15m"
    assert d.disable_wait is True


def test_round_trip_preserves_unknown_fields() -> None:
    obj = load("postgres")
    obj["spec"]["release"]["futureField"] = {"x": 1}
    obj["spec"]["somethingNew"] = [1, 2]
    obj["metadata"]["creationTimestamp"] = "2024-01-01T00:00:00Z"
    obj["status"] = {"conditions": []}
    d = ApplicationDefinition.from_object(obj)
    assert d.to_object() == obj
    assert d.spec.dashboard is not None and d.spec.dashboard["category"] == "PaaS"


def test_chart_ref_optional_namespace_and_api_version() -> None:
    obj = load("redis")
    obj["spec"]["release"]["chartRef"] = {
        "kind": "HelmChart",
        "name": "redis",
        "apiVersion": "source.toolkit.fluxcd.io/v1",
    }
    d = ApplicationDefinition.from_object(obj)
    assert d.chart_ref == {"kind": "HelmChart", "name": "redis", "apiVersion": "source.toolkit.fluxcd.io/v1"}


def test_malformed_object_raises_value_error() -> None:
    obj = load("redis")
    del obj["spec"]["release"]["chartRef"]
    with pytest.raises(pydantic.ValidationError):
        ApplicationDefinition.from_object(obj)
    assert issubclass(pydantic.ValidationError, ValueError)


def test_datetime_creation_timestamp_is_normalized() -> None:
    from datetime import UTC, datetime

    obj = load("redis")
    obj["metadata"]["creationTimestamp"] = datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert ApplicationDefinition.from_object(obj).creation_timestamp == "2024-01-02T03:04:05Z"


# --------------------------------------------------------------------------- acceptance


def test_fixtures_are_accepted_together() -> None:
    pg = ApplicationDefinition.from_object(load("postgres"))
    redis = ApplicationDefinition.from_object(load("redis"))
    assert acceptance(pg, [redis]).accepted
    verdict = acceptance(redis, [pg, redis])
    assert verdict.accepted and verdict.reason == "Accepted"


@pytest.mark.parametrize(
    "schema",
    [
        "not json",
        "[1, 2]",
        '{"type": "string"}',
        '{"type": "object", "properties": {"a": {"type": "nope"}}}',
        "{}",
    ],
)
def test_invalid_schema(schema: str) -> None:
    d = make(load("redis"), spec__application__openAPISchema=schema)
    verdict = acceptance(d, [])
    assert (verdict.accepted, verdict.reason) == (False, "InvalidSchema")
    assert verdict.message
    assert d.schema == {}


def test_kind_conflict_older_wins() -> None:
    old = make(load("postgres"), created="2024-01-01T00:00:00Z")
    new = make(load("postgres"), name="postgres-copy", created="2024-02-01T00:00:00Z")
    assert acceptance(old, [new]).accepted
    verdict = acceptance(new, [old])
    assert (verdict.accepted, verdict.reason) == (False, "KindConflict")
    assert "'postgres'" in verdict.message


def test_kind_conflict_tie_broken_by_name() -> None:
    a = make(load("redis"), name="a-redis", created="2024-01-01T00:00:00Z")
    b = make(load("redis"), name="b-redis", created="2024-01-01T00:00:00Z")
    assert acceptance(a, [b]).accepted
    assert acceptance(b, [a]).reason == "KindConflict"


def test_conflict_on_plural_only() -> None:
    old = make(load("redis"), created="2024-01-01T00:00:00Z")
    new = make(
        load("postgres"), name="other", created="2024-02-01T00:00:00Z", spec__application__plural="redises"
    )
    assert acceptance(new, [old]).reason == "KindConflict"


def test_invalid_older_definition_does_not_block() -> None:
    broken = make(load("redis"), created="2024-01-01T00:00:00Z", spec__application__openAPISchema="{")
    new = make(load("redis"), name="redis-2", created="2024-02-01T00:00:00Z")
    assert acceptance(broken, [new]).reason == "InvalidSchema"
    assert acceptance(new, [broken]).accepted


def test_prefix_too_long() -> None:
    ok = make(load("redis"), spec__release__prefix="p" * 52)
    assert acceptance(ok, []).accepted
    long = make(load("redis"), spec__release__prefix="p" * 53)
    verdict = acceptance(long, [])
    assert (verdict.accepted, verdict.reason) == (False, "InvalidRelease")
    assert "53 characters" in verdict.message


def test_prefix_pattern_and_empty_prefix() -> None:
    assert acceptance(make(load("redis"), spec__release__prefix=""), []).accepted
    assert acceptance(make(load("redis"), spec__release__prefix="Redis_"), []).reason == "InvalidRelease"
    assert acceptance(make(load("redis"), spec__release__prefix="redis-\n"), []).reason == "InvalidRelease"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("release.cozystack.io/helm-install-timeout", "15 minutes"),
        ("release.cozystack.io/helm-upgrade-timeout", "10us"),
        ("release.cozystack.io/helm-upgrade-timeout", "10m\n"),
        ("release.cozystack.io/helm-install-disable-wait", "yes"),
    ],
)
def test_bad_release_annotations(key: str, value: str) -> None:
    d = make(load("redis"), metadata__annotations={key: value})
    verdict = acceptance(d, [])
    assert verdict.reason == "InvalidRelease" and key in verdict.message


@pytest.mark.parametrize(
    ("field", "value"),
    [("kind", "postgres"), ("kind", "Post-gres"), ("kind", "Redis\n"), ("plural", "Redises"), ("plural", "redises\n"),
     ("singular", "re_dis")],
)
def test_invalid_names(field: str, value: str) -> None:
    d = make(load("redis"), **{f"spec__application__{field}": value})
    assert acceptance(d, []).reason == "InvalidNames"


