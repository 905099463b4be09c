"""Naming and ownership labels: how an Application finds its Terraform and back."""

from __future__ import annotations

from dataclasses import replace

from shared.api import selectors
from shared.api.names import dns1035_label_error
from tests.unit.tofu_samples import GROUP, Defn, app
from tofu_agl import names
from tofu_agl.build import build
from tofu_agl.build import fence as build_fence


def test_backing_name_and_its_inverse() -> None:
    d = Defn()
    assert names.backing_name(d, "net") == "vpc-net"
    assert names.application_name(d, "vpc-net") == "net"
    assert names.application_name(d, "other-net") is None
    assert names.application_name(d, "vpc-") is None
    assert names.application_name(replace(d, prefix=""), "net") == "net"


def test_backing_selector_and_user_keys() -> None:
    assert names.watched_selector(Defn(), "tofu.example.org") == (
        "apps.cozystack.io/application.kind=VPC,apps.cozystack.io/application.group=tofu.example.org"
    )
    # What every reader of the backing objects uses: the kind's read fence is not one of them.
    assert names.backing_selector(Defn(), "tofu.example.org") == (
        names.watched_selector(Defn(), "tofu.example.org") + ",!agl.cozystack.io/read-fence"
    )
    assert names.user_selector_key("team") == "apps.cozystack.io-team"


def test_is_application_needs_kind_and_group_labels() -> None:
    tf = build(Defn(), app(), group=GROUP)
    assert names.is_application(tf, "VPC", GROUP)
    assert not names.is_application(tf, "Bucket", GROUP)
    assert not names.is_application(tf, "VPC", "tofu.example.org")
    assert not names.is_application({"metadata": {"name": "vpc-net"}}, "VPC", GROUP)


def test_the_read_fence_is_watched_but_no_application() -> None:
    fence = build_fence(Defn(), group=GROUP)
    labels = fence["metadata"]["labels"]
    assert selectors.matches(selectors.parse_label_selector(names.watched_selector(Defn(), GROUP)), labels)
    assert not selectors.matches(selectors.parse_label_selector(names.backing_selector(Defn(), GROUP)), labels)
    assert not names.is_application(fence, "VPC", GROUP)
    assert fence["spec"]["suspend"] is True
    # No Application name (a DNS-1035 label) with any prefix gives the fence's name.
    assert dns1035_label_error(names.fence_name(Defn())) is not None
