"""shared.names: DNS-1035 labels and DNS-1123 subdomains."""

from __future__ import annotations

import pytest

from shared.api.names import dns1035_label_error, dns1123_label_error, dns1123_subdomain_error


@pytest.mark.parametrize("name", ["a", "my-db", "abc-123", "x" * 63])
def test_dns1035_valid(name: str) -> None:
    assert dns1035_label_error(name) is None


@pytest.mark.parametrize("name", ["", "1abc", "-a", "a-", "My-db", "a_b", "a.b", "x" * 64])
def test_dns1035_invalid(name: str) -> None:
    assert dns1035_label_error(name) is not None


def test_dns1035_custom_max_len() -> None:
    # helm_agl limits names to 53 - len(prefix)
    assert dns1035_label_error("a" * 44, max_len=44) is None
    assert dns1035_label_error("a" * 45, max_len=44) == "must be no more than 44 characters"


def test_dns1035_message_names_the_rule() -> None:
    message = dns1035_label_error("Bad")
    assert message is not None and "DNS-1035 label" in message and "[a-z]([-a-z0-9]*[a-z0-9])?" in message


@pytest.mark.parametrize("name", ["a", "1abc", "my-db.example.com", "x" * 253, "0"])
def test_dns1123_subdomain_valid(name: str) -> None:
    assert dns1123_subdomain_error(name) is None


@pytest.mark.parametrize("name", ["", "-a", "a..b", "a.", "A", "a_b", "x" * 254, "a/b"])
def test_dns1123_subdomain_invalid(name: str) -> None:
    assert dns1123_subdomain_error(name) is not None


def test_dns1123_label() -> None:
    assert dns1123_label_error("1-abc") is None
    assert dns1123_label_error("a.b") is not None
    assert dns1123_label_error("x" * 64) is not None
