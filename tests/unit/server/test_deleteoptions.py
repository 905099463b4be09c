"""A DELETE's body decoded as kube-apiserver decodes it; the messages are the oracle CRD's (tests/contract)."""

from __future__ import annotations

import pytest

from shared.api import errors
from shared.server import deleteoptions

KIND_STRUCT = 'struct { APIVersion string "json:\\"apiVersion,omitempty\\""; Kind string "json:\\"kind,omitempty\\"" }'


@pytest.mark.parametrize(("body", "message"), [
    ('{"gracePeriodSeconds": "x"}',
     "json: cannot unmarshal string into Go struct field DeleteOptions.gracePeriodSeconds of type int64"),
    ('{"gracePeriodSeconds": 1.50}',
     "json: cannot unmarshal number 1.50 into Go struct field DeleteOptions.gracePeriodSeconds of type int64"),
    ('{"gracePeriodSeconds": -9223372036854775809}', "json: cannot unmarshal number -9223372036854775809 into Go "
     "struct field DeleteOptions.gracePeriodSeconds of type int64"),
    ('{"propagationPolicy": 5, "gracePeriodSeconds": "x"}', "json: cannot unmarshal number into Go struct field "
     "DeleteOptions.propagationPolicy of type v1.DeletionPropagation"),
    ('{"dryRun": "All"}', "json: cannot unmarshal string into Go struct field DeleteOptions.dryRun of type []string"),
    ('{"dryRun": ["All", true]}',
     "json: cannot unmarshal bool into Go struct field DeleteOptions.dryRun of type string"),
    ('{"preconditions": {"uid": 5}}',
     "json: cannot unmarshal number into Go struct field Preconditions.preconditions.uid of type types.UID"),
    ('{"preconditions": []}',
     "json: cannot unmarshal array into Go struct field DeleteOptions.preconditions of type v1.Preconditions"),
    ('{"gracePeriodSeconds": "x",}', "couldn't get version/kind; json parse error: invalid character '}' looking "
     "for beginning of object key string"),
    ("  ", "couldn't get version/kind; json parse error: unexpected end of JSON input"),
    ("[1]", f"couldn't get version/kind; json parse error: json: cannot unmarshal array into Go value of type "
     f"{KIND_STRUCT}"),
    ('{"gracePeriodSeconds": "x", "kind": 5}', "couldn't get version/kind; json parse error: json: cannot unmarshal "
     "number into Go struct field .kind of type string"),
    ('{"gracePeriodSeconds": "x", "kind": "Pod"}',
     'no kind "Pod" is registered for version "meta.k8s.io/v1" in scheme "pkg/runtime/scheme.go:111"'),
])
def test_a_field_of_the_wrong_type_is_gos_first_decoding_error(body: str, message: str) -> None:
    with pytest.raises(errors.ApiError) as refused:
        deleteoptions.decode(body.encode())
    assert (refused.value.code, refused.value.reason, refused.value.message) == (400, "BadRequest", message)


def test_null_and_unknown_fields_are_no_options() -> None:
    assert deleteoptions.decode(b"null") == {}
    stated = deleteoptions.decode(b'{"gracePeriodSeconds": null, "extra": 1.5, "dryRun": ["All", null], '
                                  b'"preconditions": {"uid": "u", "other": 1}, "propagationPolicy": "Orphan"}')
    assert stated["propagationPolicy"] == "Orphan" and stated["preconditions"]["uid"] == "u"
    assert stated["dryRun"] == ["All", ""], "Go decodes a null string as the empty one"
