"""One binder per expert family: each enumerates every plausible binding of its family's experts to a kernel
from the kernel's evidence (``enumerate_bindings(evidence, library) -> list[Binding]``), [] when the kernel
does not compute what the family computes."""

from agent_core.templating.experts.families import gated, merge, quant, quant_tiles, rotary, rows

BINDERS = (rows, gated, merge, rotary, quant, quant_tiles)
