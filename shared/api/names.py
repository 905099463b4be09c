"""Kubernetes object-name rules.

Served kinds must refuse names that the backing object (or a Service/Secret derived from it)
could not carry, *before* anything is written; otherwise kube-apiserver would reject the backing
object later and the user would see a confusing error about a resource they never created.
The messages follow the wording users know from kube-apiserver's own validation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class _NameRule:
    """One of kube-apiserver's name rules: the pattern, the length limit and the message it gives."""

    pattern: re.Pattern[str]
    message: str

    def error(self, name: str, max_len: int) -> str | None:
        if not name:
            return "a name is required"
        if len(name) > max_len:
            return f"must be no more than {max_len} characters"
        if not self.pattern.fullmatch(name):
            return self.message
        return None


_DNS1035_LABEL = _NameRule(
    re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$"),
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', "
    "start with an alphabetic character, and end with an alphanumeric character "
    "(e.g. 'my-name', or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')",
)
_DNS1123_LABEL = _NameRule(
    re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"),
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character "
    "(e.g. 'my-name', or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
)
_DNS1123_SUBDOMAIN = _NameRule(
    re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"),
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
)

DNS1123_SUBDOMAIN_MAX = 253


def dns1035_label_error(name: str, max_len: int = 63) -> str | None:
    """Why ``name`` is not a DNS-1035 label of at most ``max_len`` characters, or None.

    ``max_len`` is a parameter because served names are shortened by the backing object's
    prefix (``53 - len(prefix)`` for Helm releases).
    """
    return _DNS1035_LABEL.error(name, max_len)


def dns1123_label_error(name: str, max_len: int = 63) -> str | None:
    """Why ``name`` is not a DNS-1123 label (may start with a digit), or None."""
    return _DNS1123_LABEL.error(name, max_len)


def dns1123_subdomain_error(name: str) -> str | None:
    """Why ``name`` is not a DNS-1123 subdomain (the rule for most object names), or None."""
    return _DNS1123_SUBDOMAIN.error(name, DNS1123_SUBDOMAIN_MAX)


def byte_length(text: str) -> int:
    """``text``'s length as Go's ``len`` counts a string: in UTF-8 bytes."""
    return len(text.encode("utf-8", "surrogatepass"))


def label_prefix_errors(prefix: str) -> list[str]:
    """Why ``prefix`` is not a DNS-1123 subdomain, in the words of apimachinery's ``api/validate/content`` package,
    which checks label keys (and so annotation keys and finalizers) since Kubernetes 1.35: the length in bytes, and
    both reasons where both hold."""
    errors = [f"must be no more than {DNS1123_SUBDOMAIN_MAX} bytes"] if byte_length(prefix) > DNS1123_SUBDOMAIN_MAX \
        else []
    if not _DNS1123_SUBDOMAIN.pattern.fullmatch(prefix):
        errors.append(_DNS1123_SUBDOMAIN.message)
    return errors
