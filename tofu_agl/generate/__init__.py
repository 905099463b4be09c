"""Generate a TofuApplicationDefinition from an OpenTofu module (``python -m tofu_agl.generate``).

A platform engineer should not have to rewrite a module's variables as JSON Schema by hand: the
module already says what it accepts.  The package reads the module (:mod:`.hcl`), maps each
variable's type constraint to a schema keeping its structure (:mod:`.types`), turns the simple
``validation`` conditions into schema keywords (:mod:`.validation`) and assembles the definition
(:mod:`.definition`).  What cannot be translated is reported, never dropped silently.
"""
