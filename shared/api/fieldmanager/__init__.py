"""Server-side apply and field ownership, computed from a kind's schema as kube-apiserver does it.

kube-apiserver tracks field ownership with structured-merge-diff (Go); no Python library does
structured merge, so this package implements it by hand from the published algorithm: typed set,
merge, compare and remove operations over a structural schema (:mod:`.typed`), the ``FieldsV1``
encoding (:mod:`.fieldpath`), the Apply/Update updater (:mod:`.updater`) and kube-apiserver's
field-manager layers with its conflict Status (:mod:`.managed`), which keeps what a create records per shape
of object (:mod:`.shapes`).  Entry points work on plain JSON
data: :class:`FieldManager` for whole objects, :class:`Updater` for any typed value.
"""

from shared.api.fieldmanager.fieldpath import from_fields_v1, path_string, to_fields_v1
from shared.api.fieldmanager.managed import (
    FieldManager,
    conflict_error,
    decode,
    encode,
    from_annotation,
    manager_from_user_agent,
    object_type,
    to_annotation,
)
from shared.api.fieldmanager.typed import MISSING, compare, field_set, merge, remove_items
from shared.api.fieldmanager.updater import Conflict, Conflicts, Owned, Updater

__all__ = [
    "MISSING",
    "Conflict",
    "Conflicts",
    "FieldManager",
    "Owned",
    "Updater",
    "compare",
    "conflict_error",
    "decode",
    "encode",
    "field_set",
    "from_annotation",
    "from_fields_v1",
    "manager_from_user_agent",
    "merge",
    "object_type",
    "path_string",
    "remove_items",
    "to_annotation",
    "to_fields_v1",
]
