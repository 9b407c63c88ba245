"""The values each kind of structural parameter is offered (the original value is always added)."""

from __future__ import annotations

SM_COUNT = 132  # H100 SXM / H200: grid sizes are offered as multiples of it
POW2_BLOCKS = [32, 64, 128, 256, 512, 1024]
ALL_BLOCKS = list(range(32, 1025, 32))
BLOCK_XS = [8, 16, 32, 64, 128, 256, 512, 1024]  # x of a 2D block
BLOCK_YS = [1, 2, 4, 8, 16, 32]
WARPS = [1, 2, 4, 8, 16, 32]  # warps of a 1-D block written as WARPS * 32
UNROLLS = [1, 2, 4, 8, 16]
TEMPLATE_VALUES = [1, 2, 4, 8, 16]
ITEMS = [1, 2, 4, 8, 16, 32]
MIN_BLOCKS = [1, 2, 3, 4, 6, 8]
GRIDS = sorted({SM_COUNT * k for k in (1, 2, 3, 4, 6, 8, 12, 16, 32)} | {2 ** i for i in range(6, 17)})
