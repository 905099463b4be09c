"""The values of the Secrets a Terraform reads, kept to mask them in what a tenant reads of its Application.

tofu-controller hands OpenTofu the values of the Secrets a Terraform names (``varsFrom``,
``vars[].valueFrom.secretKeyRef``, ``backendConfigsFrom``, ``cliConfigSecretRef``, and the runner pod
template's environment and volumes: ``TF_VAR_`` variables come from there too), and OpenTofu prints a
value in clear where the module does not mark it sensitive: in a diagnostic, which tofu-controller copies
into its ``Ready`` message, or in a plan.  A tenant who may read the Application need not be one who may
read those Secrets (the built-in ``view`` role reads no Secret), so every message and plan shown on the
Application is masked with them first.

The service reads each Secret by its exact name (``get``; it holds no ``list`` on Secrets) and keeps its
text values for :data:`MAX_AGE` seconds.  A status is projected without waiting (a get or a list must not
wait for Secrets), so :meth:`SecretValues.known` answers from what was read and starts a read for what was
not; until a Secret was read, the caller withholds what could hold its values.  A read that changes what is
known tells the listeners, which project again what they kept.  A value changed in the Secret is masked
from the next read of it on (at most :data:`MAX_AGE` after the change, once a projection asks for it), and the
values it held before stay masked too (up to :data:`MAX_VALUES` per Secret): tofu-controller's message may
still be the one OpenTofu printed with the old value.

What is kept is bounded: at most :data:`MAX_SECRETS` Secrets, the least recently asked for dropped first (a
dropped Secret is read again when asked for, its messages withheld meanwhile), and a storage's record of which
Terraforms were projected with which Secret drops the Terraforms its informer no longer holds.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from shared.api.errors import ApiError
from shared.bodies import JSON
from shared.client.informer import Key
from shared.client.kube import ObjectClient

from .plan import mask_text

log = logging.getLogger(__name__)

#: A Secret read longer ago than this is read again when a projection next needs it.
MAX_AGE = 60.0
#: A Secret that could not be read (not a 404) is tried again after this long.
UNREADABLE_AGE = 5.0

#: Secrets whose values are kept at most; the least recently asked for is dropped first.
MAX_SECRETS = 10_000
#: Values kept per Secret at most, its current ones first and then those it held before, newest first.
MAX_VALUES = 64
#: A storage's record of which Terraforms read which Secret is pruned of deleted Terraforms above this size.
PRUNE_FLOOR = 1024

#: (namespace, name) of a Secret.
SecretKey = tuple[str, str]
#: A kept Secret: when its read was sent, the values to mask with (None: unreadable), and every value it held.
Entry = tuple[float, tuple[str, ...] | None, tuple[str, ...]]


def secret_references(terraform: JSON) -> list[str]:
    """The names of the Secrets (in the Terraform's namespace) whose values tofu-controller hands to OpenTofu."""
    spec = terraform.get("spec") or {}
    names: set[str] = set()
    for source in [*(spec.get("varsFrom") or []), *(spec.get("backendConfigsFrom") or [])]:
        if isinstance(source, dict) and source.get("kind") == "Secret" and source.get("name"):
            names.add(str(source["name"]))
    for var in spec.get("vars") or []:
        ref = ((var.get("valueFrom") or {}).get("secretKeyRef") or {}) if isinstance(var, dict) else {}
        if ref.get("name"):
            names.add(str(ref["name"]))
    cli = spec.get("cliConfigSecretRef") or {}
    if isinstance(cli, dict) and cli.get("name"):
        names.add(str(cli["name"]))
    runner = _runner_spec(spec.get("runnerPodTemplate"))
    for part in RUNNER_PARTS:
        names.update(name for entry in _entries(runner, part) for name in _runner_secrets(part, entry))
    return sorted(names)


#: The parts of a runner pod's spec that can hand the runner a Secret's values (as environment or files).
RUNNER_PARTS = ("env", "envFrom", "volumes")


def _runner_spec(template: Any) -> JSON:
    spec = template.get("spec") if isinstance(template, dict) else None
    return spec if isinstance(spec, dict) else {}


def _entries(spec: JSON, part: str) -> list[JSON]:
    value = spec.get(part)
    return [entry for entry in value if isinstance(entry, dict)] if isinstance(value, list) else []


def _runner_secrets(part: str, entry: JSON) -> Iterator[str]:
    """The Secrets one ``env``, ``envFrom`` or ``volumes`` entry of a runner pod reads."""
    if part == "env":
        refs = [((entry.get("valueFrom") or {}).get("secretKeyRef") or {}).get("name")]
    elif part == "envFrom":
        refs = [(entry.get("secretRef") or {}).get("name")]
    else:
        refs = [(entry.get("secret") or {}).get("secretName")]
        sources = (entry.get("projected") or {}).get("sources") or []
        refs += [(source.get("secret") or {}).get("name") for source in sources if isinstance(source, dict)]
    return (str(ref) for ref in refs if ref)


def secret_strings(secret: JSON) -> list[str]:
    """Every value of ``secret`` that is text (a binary value cannot be printed as itself)."""
    found: list[str] = []
    for encoded in (secret.get("data") or {}).values():
        try:
            found.append(base64.b64decode(str(encoded), validate=True).decode())
        except (binascii.Error, UnicodeDecodeError):
            continue
    return [value for value in found if value]


def controller_said_something(terraform: JSON) -> bool:
    """Whether tofu-controller wrote a message into ``terraform``'s conditions (what the Application repeats)."""
    conditions = (terraform.get("status") or {}).get("conditions")
    return isinstance(conditions, list) and any(isinstance(c, dict) and c.get("message") for c in conditions)


#: What an Application shows instead of a message of tofu-controller's that may hold a secret value.
WITHHELD_MESSAGE = "tofu-controller's message is withheld: {why}; kubectl describe shows it in the Events, redacted"


def guard_messages(conditions: list[JSON], controller_conditions: Any, masks: Sequence[str] | None) -> None:
    """Keep secret values out of the messages the Application repeats from tofu-controller's conditions.

    Those messages carry OpenTofu's diagnostics, which print a variable's value in clear where the module
    does not mark it sensitive.  Each message said by the controller (the derived conditions repeat them word
    for word) is masked with ``masks`` as the relayed Events are (:func:`plan.mask_text`); it is withheld when
    ``masks`` is None (the values of a Secret the Terraform reads are not known yet) or a value too short to
    mask bare still occurs in it.  The service's own messages (the approval command) are left as they are.
    """
    said = {c["message"] for c in controller_conditions or ()
            if isinstance(c, dict) and isinstance(c.get("message"), str) and c["message"]}
    if not said:
        return
    known = None if masks is None else sorted({m for m in masks if m}, key=len, reverse=True)
    for cond in conditions:
        message = cond.get("message")
        if not isinstance(message, str) or message not in said:
            continue
        if known is None:
            cond["message"] = WITHHELD_MESSAGE.format(
                                                      why="the Secrets it may hold values of are not read yet")
            continue
        masked = mask_text(message, known) if known else message
        if any(value in masked for value in known):
            masked = WITHHELD_MESSAGE.format( why="a secret value too short to mask is in it")
        cond["message"] = masked


class SecretValues:
    """The text values of the Secrets the service's Terraforms read, as last read, by Secret."""

    def __init__(self, secrets: ObjectClient, *, max_age: float = MAX_AGE, max_secrets: int = MAX_SECRETS) -> None:
        self._secrets = secrets
        self._max_age = max_age
        self._max_secrets = max_secrets
        #: When each Secret's read was sent, the values to mask with (its current ones, then those it held before;
        #: None: it could not be read; () when it does not exist and never held any), and every value it was
        #: seen to hold.  In the order last asked for, the least recent first.
        self._read: dict[SecretKey, Entry] = {}
        self._reading: dict[SecretKey, asyncio.Task[None]] = {}
        self._listeners: set[Callable[[SecretKey], None]] = set()
        self._drop_listeners: set[Callable[[SecretKey], None]] = set()

    def listen(self, listener: Callable[[SecretKey], None],
               dropped: Callable[[SecretKey], None] | None = None) -> None:
        """Call ``listener`` with each Secret whose known values change (first read included), and ``dropped``
        with each Secret no longer kept (:data:`MAX_SECRETS`)."""
        self._listeners.add(listener)
        if dropped is not None:
            self._drop_listeners.add(dropped)

    def forget_listener(self, listener: Callable[[SecretKey], None],
                        dropped: Callable[[SecretKey], None] | None = None) -> None:
        self._listeners.discard(listener)
        if dropped is not None:
            self._drop_listeners.discard(dropped)

    @property
    def size(self) -> int:
        """How many Secrets' values are kept."""
        return len(self._read)

    def known(self, terraform: JSON) -> list[str] | None:
        """The values of every Secret ``terraform`` reads, as last read; None while one of them was never read
        or could not be read.  Starts a read of each one missing or too old, without waiting for it."""
        return self._collect(terraform, refresh=True)

    async def values(self, terraform: JSON) -> list[str] | None:
        """As :meth:`known`, once every Secret missing or too old has been read (for reads that may wait).

        Too old is judged at the call: a read already under way joins only when it was sent after the kept one
        would have been too old, so a Secret changed before the call is never answered with what a read sent
        before the change saw (a read started one instant earlier may have been answered before the change).
        """
        asked = time.monotonic()
        namespace = str((terraform.get("metadata") or {}).get("namespace") or "")
        for name in secret_references(terraform):
            key = (namespace, name)
            for _attempt in range(2):  # the one under way, then one of its own (bounded: the key may be dropped)
                entry = self._read.get(key)
                if entry is not None and not self._stale(entry, asked):
                    break
                await self._start(key)
        return self._collect(terraform, refresh=False)

    def _collect(self, terraform: JSON, *, refresh: bool) -> list[str] | None:
        namespace = str((terraform.get("metadata") or {}).get("namespace") or "")
        values: list[str] | None = []
        for name in secret_references(terraform):
            key = (namespace, name)
            entry = self._read.pop(key, None)
            if entry is not None:
                self._read[key] = entry  # now the most recently asked for
            if refresh and (entry is None or self._stale(entry, time.monotonic())):
                self._start(key)
            if entry is None or entry[1] is None:
                values = None
            elif values is not None:
                values.extend(entry[1])
        return values

    def _stale(self, entry: Entry, at: float) -> bool:
        """Whether ``entry``'s read was sent too long before ``at`` (a read sent at ``at`` or later never is)."""
        age = self._max_age if entry[1] is not None else UNREADABLE_AGE
        return at - entry[0] > age

    def _start(self, key: SecretKey) -> asyncio.Task[None]:
        task = self._reading.get(key)
        if task is None:
            task = asyncio.create_task(self._read_one(key, time.monotonic()), name=f"secret {key[0]}/{key[1]}")
            self._reading[key] = task
        return task

    async def _read_one(self, key: SecretKey, sent: float) -> None:
        try:
            values = await self._get(key)
        finally:
            self._reading.pop(key, None)  # before any waiter resumes, so the next ask starts a read of its own
        previous = self._read.pop(key, None)
        earlier = previous[2] if previous is not None else ()
        if values is not None:
            values = tuple(dict.fromkeys((*values, *earlier)))[:MAX_VALUES]
        # Unreadable: withheld until read again (it may hold a value not seen yet); what it held is remembered.
        # Stamped with when the read was sent: a change after that may not be in it.
        self._read[key] = (sent, values, earlier if values is None else values)
        while len(self._read) > self._max_secrets:
            dropped = next(iter(self._read))
            del self._read[dropped]
            for listener in list(self._drop_listeners):
                listener(dropped)
        if previous is None or previous[1] != values:
            for listener in list(self._listeners):
                listener(key)

    async def _get(self, key: SecretKey) -> tuple[str, ...] | None:
        """The text values of the Secret ``key``: () when it does not exist, None when it cannot be read."""
        try:
            return tuple(secret_strings(await self._secrets.get(*key)))
        except ApiError as exc:
            if exc.code == 404:
                return ()  # no such Secret: it has no value to show
            log.warning("cannot read a Secret a Terraform reads; its messages stay withheld",
                        extra={"namespace": key[0], "secret": key[1], "code": exc.code})
            return None


class Masking:
    """What one kind's storage masks with: the values of the Secrets each Terraform reads, and which kept
    projections to make again when those change (they were made with the values known then)."""

    def __init__(self, values: SecretValues, forget: Callable[[Key], None], holds: Callable[[Key], bool], *,
                 prune_floor: int = PRUNE_FLOOR) -> None:
        self._values = values
        self._forget = forget
        self._holds = holds
        #: The Terraforms projected with each Secret's values, and how many (Secret, Terraform) pairs that is.
        self._readers: dict[SecretKey, set[Key]] = {}
        self._pairs = 0
        #: Above this many pairs, those of Terraforms the informer no longer holds are dropped.
        self._prune_floor = self._prune_above = prune_floor
        values.listen(self._changed, self._dropped)

    def known(self, terraform: JSON) -> list[str] | None:
        """:meth:`SecretValues.known`, remembering that ``terraform``'s projection depends on those Secrets.

        A Terraform whose conditions carry no message of tofu-controller's (one it has not reconciled yet) shows
        nothing to mask: its projection depends on no Secret, and none is read or remembered for it.
        """
        if not controller_said_something(terraform):
            return []
        meta = terraform.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
        for secret in secret_references(terraform):
            readers = self._readers.setdefault((namespace, secret), set())
            if (namespace, name) not in readers:
                readers.add((namespace, name))
                self._pairs += 1
        if self._pairs > self._prune_above:
            self._prune()
        return self._values.known(terraform)

    async def read(self, terraform: JSON) -> list[str] | None:
        """:meth:`SecretValues.values`: for reads that may wait for the Secrets."""
        return await self._values.values(terraform)

    def close(self) -> None:
        self._values.forget_listener(self._changed, self._dropped)

    @property
    def pairs(self) -> int:
        """How many (Secret, Terraform) pairs are remembered."""
        return self._pairs

    def _prune(self) -> None:
        """Forget the deleted Terraforms; run each time the pairs have doubled, so its cost is spread thin."""
        alive = {secret: kept for secret, readers in self._readers.items()
                 if (kept := {key for key in readers if self._holds(key)})}
        self._readers = alive
        self._pairs = sum(len(readers) for readers in alive.values())
        self._prune_above = max(self._prune_floor, 2 * self._pairs)

    def _dropped(self, secret: SecretKey) -> None:
        # Its values are no longer kept: a Terraform that reads it is withheld and remembered again when next
        # projected, and what was projected with it stays right (it was masked with the values then).
        self._pairs -= len(self._readers.pop(secret, ()))

    def _changed(self, secret: SecretKey) -> None:
        readers = self._readers.pop(secret, set())
        self._pairs -= len(readers)
        for key in readers:
            self._forget(key)
