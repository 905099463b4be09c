"""A watch-backed cache of one resource that is also a replayable watch source, in small pieces.

The pieces, in the order data flows through them (client-go's ``tools/cache`` has the same split):

* :mod:`.source` -- where objects come from: kube-apiserver's list, watch and current revision;
* :mod:`.reflector` -- the list/watch loop, with backoff;
* :mod:`.store` -- the current objects, packed (:mod:`.packing`), and the revision they are current at;
* :mod:`.history` and :mod:`.relist` -- the events a resuming watch is replayed from, and those a
  relist synthesises;
* :mod:`.fanout` -- the watchers, each with its own bounded buffer;
* :mod:`.consistency` -- when a list may be answered from the cache;
* :mod:`.informer` -- the shared informer that wires them together.
"""

from .fanout import Subscription
from .informer import Informer, Tuning, consistent_list_answers
from .packing import Key, Packed, Packer, parse_rv
from .store import Cached, Lookup
from .transforms import Transform, keeping_spec, without_managed_fields

__all__ = [
    "Cached",
    "Informer",
    "Key",
    "Lookup",
    "Packed",
    "Packer",
    "Subscription",
    "Transform",
    "Tuning",
    "consistent_list_answers",
    "keeping_spec",
    "parse_rv",
    "without_managed_fields",
]
