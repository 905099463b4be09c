"""An Application's labels and annotations: refused as kube-apiserver refuses a custom resource's, then as stored.

A user's label or annotation is stored on the backing object under a prefixed key (each stack's
``user_selector_key``), so it must be valid twice: as the user wrote it, which kube-apiserver would check on a
CRD in the words below, and as stored, which can only fail for a key whose name part is near 63 characters
(the ``long-metadata-keys`` difference of the differential tier).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from shared.api import goformat
from shared.api.errors import Cause, field_cause
from shared.api.names import byte_length
from shared.api.ownership import qualified_name_errors

__all__ = ["label_and_annotation_causes", "label_value_errors"]

_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_LABEL_VALUE_RULE = ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
                     "and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
                     "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")


def label_value_errors(value: str) -> list[str]:
    """Why ``value`` is no label value, in kube-apiserver's words; empty if it is one."""
    errors = ["must be no more than 63 bytes"] if byte_length(value) > 63 else []
    if not _LABEL_VALUE.fullmatch(value):
        errors.append(_LABEL_VALUE_RULE)
    return errors


def label_and_annotation_causes(meta: Mapping[str, Any], stored_key: Callable[[str], str]) -> list[Cause]:
    """The causes of ``meta``'s labels and annotations; ``stored_key`` is the key a user's key is stored under."""
    causes: list[Cause] = []
    for field, is_label in (("labels", True), ("annotations", False)):
        entries = meta.get(field)
        if entries is None:
            continue
        path = f"metadata.{field}"
        if not isinstance(entries, dict):
            causes.append(field_cause(path, "Invalid value: must be a map of strings", "FieldValueTypeInvalid"))
            continue
        for key, value in entries.items():
            key = str(key)
            # kube-apiserver checks an annotation's key in lower case, a label's as written.
            written = qualified_name_errors(key if is_label else key.lower())
            causes += [field_cause(path, f"Invalid value: {goformat.quote(key)}: {why}") for why in written]
            stored = stored_key(key)
            if not written and (why := qualified_name_errors(stored)):
                causes.append(field_cause(path, f"Invalid value: {goformat.quote(key)}: {'; '.join(why)} "
                                                f"(stored as {goformat.quote(stored)})"))
            if not isinstance(value, str):
                causes.append(field_cause(path, f"Invalid value: {goformat.quote(key)}: value must be a string",
                                          "FieldValueTypeInvalid"))
            elif is_label:
                causes += [field_cause(path, f"Invalid value: {goformat.quote(value)}: {why}")
                           for why in label_value_errors(value)]
    return causes
