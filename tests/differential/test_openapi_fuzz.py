"""Schemathesis on the OpenAPI v3 each service publishes: no generated request may get a 5xx.

Requests valid and invalid for the published document (bodies, query parameters, names) go through
kube-apiserver's aggregation to the service, as any client's would.  Part of the long profile
(``nox -s fuzz``) only: it needs the ``fuzz`` extra and takes minutes.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.differential.conftest import LONG_EXAMPLES_ENV, PROFILE_ENV
from tests.differential.kinds import KINDS, VERSION
from tests.differential.runner import World
from tests.kube import Api

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis comes with the fuzz extra (nox -s fuzz)")
requests = pytest.importorskip("requests")

if os.environ.get(PROFILE_ENV) != "long":
    pytest.skip("the OpenAPI fuzzing runs in the long profile (nox -s fuzz)", allow_module_level=True)

#: Namespace the generated requests address (so some reach objects instead of a 404).
NAMESPACE = "openapi-fuzz"


@pytest.mark.parametrize("group", sorted({kind.group for kind in KINDS.values()}))
def test_no_server_errors(world: World, group: str) -> None:
    api = Api(world.cluster)
    code, doc = api.request("GET", f"/openapi/v3/apis/{group}/{VERSION}")
    assert code == 200, doc
    api.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                "metadata": {"name": NAMESPACE}})
    schema = schemathesis.openapi.from_dict(doc)
    cases = st.one_of(
        schema.as_strategy(path_parameters={"namespace": NAMESPACE}),
        schema.as_strategy(schemathesis.GenerationMode.NEGATIVE, path_parameters={"namespace": NAMESPACE}),
        schema.as_strategy(schemathesis.GenerationMode.NEGATIVE),
    )
    pki = api.cluster.pki_dir
    session = requests.Session()
    tls = {"verify": str(pki / "ca.crt"), "cert": (str(pki / "admin.crt"), str(pki / "admin.key"))}
    server = api.cluster.server

    @settings(max_examples=int(os.environ.get(LONG_EXAMPLES_ENV, "750")), deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(case=cases)
    def check(case: Any) -> None:
        if isinstance(case.query, dict) and "watch" in case.query:
            case.query["timeoutSeconds"] = 1  # a watch streams until it times out; a short one is enough here
        response = case.call(base_url=server, session=session, timeout=30, **tls)
        assert response.status_code < 500, (case.method, case.formatted_path, case.query, case.body,
                                            response.status_code, response.text[:2000])

    check()
