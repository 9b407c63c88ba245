"""The row families: RMSNorm, fused add + RMSNorm, LayerNorm, softmax (one row of ``hidden`` elements at a time).

Evidence: float buffers, the largest ones (the rows) of one dtype, the smaller inputs (weights) one row long;
the row length from an int argument (or two, or a constant) that divides the rows; the row count from an
argument that holds it, else the grid (one row per block). Enumerated: which argument is the row length,
which float argument or literal is eps, the order of two weights (gamma, beta) or two in/out rows (x,
residual), in place or out of place; conventions: eps inside or outside the root, the normalized value
rounded to the storage type before the weight multiply or not. The user's kernel may walk the rows one per
block, several per block or grid-stride: the expert brings its own launch, only the row count matters.
RMSNorm and fused add + RMSNorm also with the normalized row quantized to fp8 by a static scale read from the
device (a byte output of the rows' size whose type or conversion shows fp8, a one-element fp32 input); RMSNorm also
with a dynamic scale per row (an fp32 output of one value per row beside the fp8 or int8 output, the floor and the
nullable upper bound of the scale read from the body: ``_dynamic_quant``).

One module per job: ``common`` (what every row binder reads of the rows), ``norm_conventions`` (eps, the weight's
offset and the numeric conventions of the normalizations), ``plain`` (the plain form of each family, read
together), and the other forms of each family: ``rms_norm`` (strided input, an output type of its own, an add
after the weight),
``fused_add`` (general form; in place on a strided input), ``add_norm`` (add, then normalize), ``layer_norm``
(general forms), ``norm_quant`` (static and dynamic quant), ``norm_stats`` (per-row statistics), ``softmax`` (general
form) with ``softmax_log``, ``softmax_keys``, ``softmax_masks`` and ``softmax_sinks``, and ``softmax_alibi``;
``softmax_channels`` (a softmax over a strided dimension: NCHW's channels).
``enumerate_bindings`` composes them in one fixed order: the binder's order breaks ties between equally supported
bindings.
"""

from __future__ import annotations

from agent_core.templating.experts.binding import Binding
from agent_core.templating.experts.evidence import Evidence
from agent_core.templating.experts.families.rows.add_norm import _add_norm_general
from agent_core.templating.experts.families.rows.fused_add import _fused_add_general, _strided_fused_add
from agent_core.templating.experts.families.rows.layer_norm import _layer_norm_general
from agent_core.templating.experts.families.rows.norm_quant import _dynamic_quant, _static_fp8
from agent_core.templating.experts.families.rows.norm_stats import _rms_norm_stats
from agent_core.templating.experts.families.rows.plain import _row_bindings
from agent_core.templating.experts.families.rows.rms_norm import (_padded_rms, _rms_norm_out_type, _rms_norm_post_add,
                                                                   _strided_rms)
from agent_core.templating.experts.families.rows.softmax import _softmax_general
from agent_core.templating.experts.families.rows.softmax_alibi import _softmax_alibi
from agent_core.templating.experts.families.rows.softmax_channels import _softmax_channels
from agent_core.templating.experts.families.rows.softmax_log import _softmax_padded
from agent_core.templating.experts.library import Expert


def enumerate_bindings(ev: Evidence, lib: dict[str, Expert]) -> list[Binding]:
    return (_row_bindings(ev, lib) + _softmax_general(ev, lib) + _softmax_padded(ev, lib) + _fused_add_general(ev, lib)
            + _strided_rms(ev, lib) + _padded_rms(ev, lib) + _layer_norm_general(ev, lib) + _static_fp8(ev, lib)
            + _add_norm_general(ev, lib) + _dynamic_quant(ev, lib) + _softmax_alibi(ev, lib) + _rms_norm_stats(ev, lib)
            + _strided_fused_add(ev, lib) + _rms_norm_out_type(ev, lib) + _rms_norm_post_add(ev, lib)
            + _softmax_channels(ev, lib))
