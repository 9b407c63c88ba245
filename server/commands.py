"""Command ids the server advertises (executeCommandProvider); the client must not register these."""

OPTIMIZE = "kerntune.optimize"
TEMPLATIZE = "kerntune.templatize"
APPLY_BEST = "kerntune.applyBest"
CANCEL = "kerntune.cancel"
CREATE_SPEC = "kerntune.createSpec"
SHOW_RESULT = "kerntune.showResult"

ALL = [OPTIMIZE, TEMPLATIZE, APPLY_BEST, CANCEL, CREATE_SPEC, SHOW_RESULT]
