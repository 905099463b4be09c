"""``shared.bodies.dumps``: the one JSON encoder of answers, kube requests and the informer's packed objects."""

from __future__ import annotations

import json

from shared.bodies import dumps


def test_json_is_compact_utf8_whatever_its_integers() -> None:
    """orjson for the usual body; an integer beyond 64 bits, which a user's spec may hold and kube-apiserver
    accepts, still goes out (the json module), in the same compact UTF-8 form."""
    assert dumps({"spec": {"replicas": 3, "name": "café"}}) == '{"spec":{"replicas":3,"name":"café"}}'.encode()
    big = {"spec": {"n": 2**70, "name": "café"}}
    assert dumps(big) == b'{"spec":{"n":1180591620717411303424,"name":"caf\xc3\xa9"}}'
    assert json.loads(dumps(big)) == big
