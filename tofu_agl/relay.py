"""Which Application a Terraform Event is about, and what of its message may be told: tofu-controller's
Events relayed onto the Application, with every known secret value redacted.

tofu-controller reports plan, apply, destroy, drift and output writing as Events about the Terraform
(:mod:`shared.client.relay` watches them); their messages carry OpenTofu's own output. OpenTofu
prints ``(sensitive value)`` for what the module marks sensitive, but not everywhere (a value copied
into an attribute the provider does not mark is printed in clear), and a module need not mark an
input that a definition or a Secret treats as secret. So the relay redacts, as the plan preview does:

- the strings of the Application's ``x-cozystack-sensitive`` properties (:func:`plan.sensitive_values`);
- every value of every Secret the Terraform reads (``varsFrom``, ``vars[].valueFrom.secretKeyRef``,
  ``backendConfigsFrom``, ``cliConfigSecretRef``), read when the Event is relayed.

It fails closed: when such a Secret cannot be read, or a known value still occurs in the redacted
text (a value shorter than :data:`plan.MIN_BARE_SECRET` is masked only where quoted), the relayed
message is a fixed notice instead, so a relayed message never contains a known secret value.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from shared.api.errors import ApiError
from shared.api.relayed import Watched
from shared.bodies import JSON
from shared.client.events import involved_ref
from shared.client.kube import ObjectClient
from shared.client.relay import Resolve, Target

from .definition import TofuDefinitionView
from .names import KIND_LABEL, TF_GROUP, TF_KIND
from .plan import mask_text, sensitive_values
from .project import to_application
from .secretvalues import secret_references, secret_strings

#: The Events relayed: tofu-controller's, about Terraforms.
WATCHED = Watched(TF_GROUP, TF_KIND)
#: What a relayed Event says instead of a message that could not be proven free of secret values.
WITHHELD = "{reason}: message withheld, it could not be proven free of secret values ({why})"


def application_of(terraform: JSON, definitions: Iterable[TofuDefinitionView],
                   group: str) -> tuple[TofuDefinitionView, JSON] | None:
    """The served definition and the Application ``terraform`` backs, or None."""
    kind = ((terraform.get("metadata") or {}).get("labels") or {}).get(KIND_LABEL)
    for defn in definitions:
        if defn.kind == kind:
            app = to_application(defn, terraform, group=group)
            return (defn, app) if app is not None else None
    return None


def redacted(reason: str, message: str, secrets: Sequence[str]) -> str:
    """``message`` with every secret masked; the fixed notice when a secret would still show."""
    known = sorted(set(secrets), key=len, reverse=True)
    masked = mask_text(message, known)
    if any(secret in masked for secret in known):
        return WITHHELD.format(reason=reason, why="a secret value too short to mask occurs in it")
    return masked


def resolver(served: Callable[[], Iterable[TofuDefinitionView]], group: str, secrets: ObjectClient) -> Resolve:
    """The relay's view of this service: ``served`` gives the definitions served when an Event comes;
    ``secrets`` reads the Secrets the Terraform names, each by its exact name (the service's ``get`` on Secrets)."""

    async def resolve(terraform: JSON, original: JSON) -> Target | None:
        found = application_of(terraform, served(), group)
        if found is None:
            return None
        defn, app = found
        reason, message = str(original.get("reason") or ""), str(original.get("message") or "")
        known = sensitive_values(defn.schema, app.get("spec") or {})
        namespace = str((terraform.get("metadata") or {}).get("namespace") or "")
        for name in secret_references(terraform):
            try:
                known.extend(secret_strings(await secrets.get(namespace, name)))
            except ApiError as exc:
                if exc.code == 404:
                    continue  # no such Secret: it has no value that could be in the message
                why = f"Secret {name} could not be read ({exc.code} {exc.reason})"
                return Target(involved_ref(app), WITHHELD.format(reason=reason, why=why))
        return Target(involved_ref(app), redacted(reason, message, known))

    return resolve

