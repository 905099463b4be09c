"""Reading a pending plan's objects by exact name, and who may read them through the service.

The service holds ``get`` on Secrets and ConfigMaps and no ``list`` or ``watch``: tofu-controller
names a plan's readable copy ``tfplan-<workspace>-<name>`` (``.json`` for the JSON plan, a Secret),
and a plan too large for one object ``<that name>-0``, ``-1``, ... (:mod:`tofu_agl.plan`), so a
``get`` by name finds it and no cluster-wide listing of Secrets is needed.

Who may read it: ``<plural>/plan`` serves what the service read from a Secret (or ConfigMap) with
its own identity, so the user must also be allowed to ``get`` that very object
(:func:`require_read`), checked with a SubjectAccessReview.  A JSON plan carries the values of the
module's variables (redacted here, but redaction relies on OpenTofu's marking and our masking), so
it is served to nobody who could not read the Secret itself; a namespace ``view`` binding, which
grants no Secrets, therefore shows a human plan (a ConfigMap, which ``view`` may read) but not a
JSON one.
"""

from __future__ import annotations

from collections import OrderedDict

from shared.api.attributes import ResourceAttributes
from shared.api.errors import ApiError
from shared.api.rest import RequestContext
from shared.bodies import JSON
from shared.client.kube import ObjectClient

from .plan import PlanLocation, chunk_name
from .project import pending_plan

#: At most this many chunks are read (tofu-controller splits at about 1 MiB: a 64 MiB readable plan).
MAX_CHUNKS = 64


async def plan_objects(client: ObjectClient, namespace: str, location: PlanLocation) -> list[JSON]:
    """The object(s) holding the readable plan at ``location``: the single one, else its chunks in order.

    Empty when nothing is stored (yet).  A chunk that disappears mid-way ends the read; the
    caller's :func:`tofu_agl.plan.assemble` then finds the plan incomplete, as it would after a list.
    """
    try:
        return [await client.get(namespace, location.name)]
    except ApiError as exc:
        if exc.code != 404:
            raise
    chunks: list[JSON] = []
    for index in range(MAX_CHUNKS):
        try:
            chunks.append(await client.get(namespace, chunk_name(location, index)))
        except ApiError as exc:
            if exc.code != 404:
                raise
            break
    return chunks


async def require_read(ctx: RequestContext, namespace: str, location: PlanLocation) -> None:
    """Raise kube-apiserver's 403 unless the user may ``get`` the object the plan is kept in."""
    await ctx.require(ResourceAttributes("get", "", "v1", location.resource, namespace, location.name))


class PlanSummaries:
    """Summaries of pending plans, read once per plan.

    A plan is identified by the Terraform, its pending id and ``lastPlanAt`` (a re-plan of the same
    revision keeps the id but not the time), so a watch or list does not re-read the plan objects for
    every event.  Only summaries are kept: a plan not stored yet, or not readable now, is read again
    next time.  Bounded, oldest dropped first.
    """

    def __init__(self, capacity: int = 512) -> None:
        self._capacity = capacity
        self._entries: OrderedDict[tuple[str, ...], JSON] = OrderedDict()

    @staticmethod
    def key(tf: JSON) -> tuple[str, ...]:
        meta = tf.get("metadata") or {}
        status = tf.get("status") or {}
        return (str(meta.get("uid") or ""), pending_plan(tf), str(status.get("lastPlanAt") or ""),
                str((tf.get("spec") or {}).get("storeReadablePlan") or ""))

    def get(self, key: tuple[str, ...]) -> JSON | None:
        if key in self._entries:
            self._entries.move_to_end(key)
            return self._entries[key]
        return None

    def put(self, key: tuple[str, ...], summary: JSON) -> None:
        self._entries[key] = summary
        while len(self._entries) > self._capacity:
            self._entries.popitem(last=False)
