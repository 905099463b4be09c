"""How a resource of kube-apiserver is addressed: group, version and plural, and the REST paths built from them."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import quote


@dataclass(frozen=True)
class GVR:
    """Group, version and plural resource name: enough to build every URL of a resource."""

    group: str
    version: str
    plural: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        """The REST path; a falsy namespace means cluster scope (or all namespaces for a list)."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if namespace:
            base += f"/namespaces/{_seg(namespace)}"
        base += f"/{_seg(self.plural)}"
        if name:
            base += f"/{_seg(name)}"
            if subresource:
                base += f"/{_seg(subresource)}"
        return base


@lru_cache(maxsize=4096)
def _seg(value: str) -> str:
    """One path segment, percent-encoded; the same namespaces, plurals and names come again and again, and
    ``quote`` is pure Python."""
    return quote(value, safe="")
