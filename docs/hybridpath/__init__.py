"""Generate ``docs/design/hybrid-path.md``, the hybrid-path evidence of SPEC §9, from the code.

Run from the repository root: ``python -m docs.hybridpath`` (or ``nox -s docs``).  Every number in the
document is measured and every function it names is resolved by import, so the document cannot drift
from the code silently: a rename breaks generation, and ``tests/unit/test_hybrid_path_doc.py`` fails
when the committed document differs from what the generator writes.  The output depends only on the
source tree (no clock, no environment), so two runs give the same bytes.

``measure`` reduces lines to their shape and matches modules; ``stacks`` lists the sibling modules;
``reflect`` names live code; ``backend`` is Draft 2's interface as a checked Protocol; ``sections``
writes the prose.
"""
