"""helm_agl.names: the group, the HelmRelease, the label keys and the name mapping."""

from __future__ import annotations

from dataclasses import replace

import pytest

from helm_agl import names
from helm_agl.build import fence as build_fence
from shared.api import selectors
from shared.api.names import dns1035_label_error
from tests.unit.helm_samples import DEFN, FOREIGN_LABELS, make_hr


def test_constants() -> None:
    assert names.GROUP == "apps.cozystack.io"
    assert names.VERSION == "v1alpha1"
    assert names.LABEL_PREFIX == "apps.cozystack.io-"
    assert (names.KIND_LABEL, names.GROUP_LABEL, names.NAME_LABEL) == (
        "apps.cozystack.io/application.kind",
        "apps.cozystack.io/application.group",
        "apps.cozystack.io/application.name",
    )
    assert names.HR_GVR == ("helm.toolkit.fluxcd.io", "v2", "helmreleases")
    assert (names.HR_KIND, names.HR_API_VERSION) == ("HelmRelease", "helm.toolkit.fluxcd.io/v2")
    assert names.MAX_RELEASE_NAME == 53
    assert names.SHARDING_LABEL == "sharding.fluxcd.io/key"


@pytest.mark.parametrize(
    ("prefix", "name", "release"),
    [("postgres-", "db1", "postgres-db1"), ("", "db1", "db1"), ("tenant-", "root", "tenant-root")],
)
def test_backing_name_round_trip(prefix: str, name: str, release: str) -> None:
    defn = replace(DEFN, prefix=prefix)
    assert names.backing_name(defn, name) == release
    assert names.application_name(defn, release) == name


@pytest.mark.parametrize("release", ["redis-db1", "postgres-", "postgres"])
def test_application_name_without_prefix_is_none(release: str) -> None:
    assert names.application_name(DEFN, release) is None


def test_backing_selector_and_user_keys() -> None:
    assert names.watched_selector(DEFN, names.GROUP) == (
        "apps.cozystack.io/application.kind=Postgres,apps.cozystack.io/application.group=apps.cozystack.io"
    )
    # What every reader of the backing objects uses: the kind's read fence is not one of them.
    assert names.backing_selector(DEFN, names.GROUP) == (
        names.watched_selector(DEFN, names.GROUP) + ",!agl.cozystack.io/read-fence"
    )
    assert names.user_selector_key("team") == "apps.cozystack.io-team"
    assert names.user_selector_key("example.com/owner") == "apps.cozystack.io-example.com/owner"
    other = names.watched_selector(DEFN, "other.example.io")
    assert other.endswith(",apps.cozystack.io/application.group=other.example.io")


def test_is_application() -> None:
    hr = make_hr()
    assert names.is_application(hr, "Postgres", names.GROUP)
    assert not names.is_application(hr, "Redis", names.GROUP)
    assert not names.is_application(hr, "Postgres", "tofu.apps.cozystack.io")


def test_the_read_fence_is_watched_but_no_application() -> None:
    fence = build_fence(DEFN, group=names.GROUP)
    labels = fence["metadata"]["labels"]
    assert selectors.matches(selectors.parse_label_selector(names.watched_selector(DEFN, names.GROUP)), labels)
    assert not selectors.matches(selectors.parse_label_selector(names.backing_selector(DEFN, names.GROUP)), labels)
    assert not names.is_application(fence, "Postgres", names.GROUP)
    assert fence["spec"]["suspend"] is True
    # No Application name (a DNS-1035 label) with any prefix gives the fence's name.
    assert dns1035_label_error(names.fence_name(DEFN)) is not None


@pytest.mark.parametrize("labels", FOREIGN_LABELS)
def test_is_application_needs_kind_and_group_labels(labels: dict[str, str]) -> None:
    hr = make_hr()
    hr["metadata"]["labels"] = labels
    assert not names.is_application(hr, "Postgres", names.GROUP)
