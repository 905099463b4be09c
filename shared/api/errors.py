"""Kubernetes ``meta.k8s.io/v1 Status`` errors.

Every failure a client can see is raised as :class:`ApiError` and rendered by the server as a
``Status`` object, so kubectl prints the same messages it prints for built-in kinds.
"""

from __future__ import annotations

from typing import Any

Cause = dict[str, str]


class ApiError(Exception):
    """An error that maps one-to-one onto a ``Status`` response."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: dict[str, Any] | None = None,
        causes: list[Cause] | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details: dict[str, Any] = dict(details or {})
        #: kube-apiserver writes ``"details": {}`` for some errors (a forbidden path); None omits it when empty.
        self._always_details = details is not None
        if causes:
            self.details["causes"] = causes
        if retry_after is not None:
            self.details["retryAfterSeconds"] = retry_after
        self.retry_after = retry_after

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "code": self.code,
        }
        if self.reason:  # a webhook's denial may have none; kube-apiserver then leaves it out
            body["reason"] = self.reason
        if self.details or self._always_details:
            body["details"] = self.details
        return body


def _details(group: str, kind: str, name: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {"group": group, "kind": kind}
    if name:
        out["name"] = name
    return out


def deleted(group: str, plural: str, name: str, uid: str | None) -> dict[str, Any]:
    """The ``Success`` Status kube-apiserver answers a delete with when the object is gone at once
    (not kept by finalizers): it names the object, not the backing one."""
    details = _details(group, plural, name)
    if uid:
        details["uid"] = uid
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def unauthorized(message: str = "Unauthorized") -> ApiError:
    return ApiError(401, "Unauthorized", message)


def forbidden(user: str, verb: str, resource: str, group: str, namespace: str | None, name: str | None) -> ApiError:
    qualified = f"{resource}.{group}" if group else resource  # the core group is not spelt out
    what = f'{qualified} "{name}"' if name else qualified
    scope = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
    message = f'{what} is forbidden: User "{user}" cannot {verb} resource "{resource}" in API group "{group}"{scope}'
    return ApiError(403, "Forbidden", message, details=_details(group, resource, name))


def forbidden_path(user: str, verb: str, path: str) -> ApiError:
    """403 for a non-resource URL (``/metrics``, ``/openapi/v2``), worded and detailed as kube-apiserver's."""
    return ApiError(403, "Forbidden", f'forbidden: User "{user}" cannot {verb} path "{path}"', details={})


def not_found(group: str, resource: str, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{resource}.{group} "{name}" not found', details=_details(group, resource, name))


def names_other_resource(exc: ApiError, plural: str) -> bool:
    """Whether kube-apiserver's error is about something other than an object of ``plural``.

    A create in a namespace that does not exist answers 404 ``namespaces "x" not found``: that one is
    already in the user's terms and must not be renamed into "your object was not found".
    """
    kind = exc.details.get("kind")
    return bool(kind) and kind != plural


def method_not_allowed(message: str) -> ApiError:
    return ApiError(405, "MethodNotAllowed", message)


def not_acceptable(message: str) -> ApiError:
    return ApiError(406, "NotAcceptable", message)


def already_exists(group: str, resource: str, name: str) -> ApiError:
    return ApiError(
        409, "AlreadyExists", f'{resource}.{group} "{name}" already exists', details=_details(group, resource, name)
    )


def conflict(group: str, resource: str, name: str, why: str) -> ApiError:
    message = f'Operation cannot be fulfilled on {resource}.{group} "{name}": {why}'
    return ApiError(409, "Conflict", message, details=_details(group, resource, name))


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def too_large(limit: int) -> ApiError:
    return ApiError(413, "RequestEntityTooLarge", f"the request body exceeds the limit of {limit} bytes")


def unsupported_media_type(content_type: str) -> ApiError:
    return ApiError(415, "UnsupportedMediaType", f'the body of the request was in an unknown format: "{content_type}"')


def invalid(group: str, kind: str, name: str, causes: list[Cause]) -> ApiError:
    """422 Invalid; the message aggregates the causes as kube-apiserver's ``ToAggregate`` does: one
    cause as is, several (duplicates dropped) as ``[a, b]``."""
    texts = list(dict.fromkeys(f"{c.get('field', '')}: {c['message']}".lstrip(": ") for c in causes))
    summary = texts[0] if len(texts) == 1 else f"[{', '.join(texts)}]"
    message = f'{kind}.{group} "{name}" is invalid: {summary}'
    return ApiError(422, "Invalid", message, details=_details(group, kind, name), causes=causes)


def renamed_invalid(exc: ApiError, group: str, kind: str, name: str) -> ApiError:
    """kube-apiserver's 422 about a backing object, told of the object the user wrote instead.

    The backing object's metadata is validated as a custom resource's is (finalizer names,
    ownerReferences, no new finalizer on an object being deleted), so the causes are the CRD's;
    only the summary's "<Kind>.<group> "<name>"" and the details name the backing object.
    """
    _, sep, summary = exc.message.partition(" is invalid: ")
    message = f'{kind}.{group} "{name}" is invalid: {summary}' if sep else exc.message
    causes = exc.details.get("causes")
    return ApiError(422, exc.reason, message, details=_details(group, kind, name), causes=causes)


def field_cause(field: str, message: str, reason: str = "FieldValueInvalid") -> Cause:
    return {"reason": reason, "message": message, "field": field}


def internal(message: str) -> ApiError:
    return ApiError(500, "InternalError", message)


def unavailable(message: str, retry_after: int = 1) -> ApiError:
    return ApiError(503, "ServiceUnavailable", message, retry_after=retry_after)
