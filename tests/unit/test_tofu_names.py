"""Naming and ownership labels: how an Application finds its Terraform and back."""

from __future__ import annotations

from dataclasses import replace

from tests.unit.tofu_samples import GROUP, Defn, app
from tofu_agl import names
from tofu_agl.build import build


def test_backing_name_and_its_inverse() -> None:
    d = Defn()
    assert names.backing_name(d, "net") == "vpc-net"
    assert names.application_name(d, "vpc-net") == "net"
    assert names.application_name(d, "other-net") is None
    assert names.application_name(d, "vpc-") is None
    assert names.application_name(replace(d, prefix=""), "net") == "net"


def test_backing_selector_and_user_keys() -> None:
    assert names.backing_selector(Defn(), "tofu.example.org") == (
        "apps.cozystack.io/application.kind=VPC,apps.cozystack.io/application.group=tofu.example.org"
    )
    assert names.user_selector_key("team") == "apps.cozystack.io-team"


def test_is_application_needs_kind_and_group_labels() -> None:
    tf = build(Defn(), app(), group=GROUP)
    assert names.is_application(tf, "VPC", GROUP)
    assert not names.is_application(tf, "Bucket", GROUP)
    assert not names.is_application(tf, "VPC", "tofu.example.org")
    assert not names.is_application({"metadata": {"name": "vpc-net"}}, "VPC", GROUP)
