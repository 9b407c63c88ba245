"""source.constants: the integer constants a file names (macros, enumerators) and template arguments read through
them."""

from agent_core.source.constants import int_constants, valued

TEXT = """
#define B 4u   // a suffix
#define A (B * 2)
#define F(x) (x + 1)
#define NAME_ONLY half
enum class Act : int { SILU, GELU = 3, RELU };
typedef enum Fmt_t {
  FP4 = A,   /* another constant */
  NF4
} Fmt_t;
enum { UNKNOWN = SOMETHING_ELSE, AFTER };
namespace ffn {
constexpr int kGelu = 7;
namespace {
static const unsigned kWarps = A / 2;
}
__global__ void k(float* x) { constexpr int kLocal = 3; x[0] = kLocal; }
}  // namespace ffn
"""


def test_macros_and_enumerators_with_their_values():
    c = int_constants(TEXT)
    assert (c["A"], c["B"]) == (8, 4)  # A names B, defined after it
    assert (c["SILU"], c["GELU"], c["RELU"], c["Act::RELU"]) == (0, 3, 4, 4)
    assert (c["FP4"], c["NF4"], c["Fmt_t::NF4"]) == (8, 9, 9)
    assert "F" not in c and "NAME_ONLY" not in c  # function-like, not an integer
    assert "UNKNOWN" not in c and "AFTER" not in c  # a value the file does not give, and what follows it
    assert (c["kGelu"], c["ffn::kGelu"], c["kWarps"], c["ffn::kWarps"]) == (7, 7, 4, 4)
    assert "kLocal" not in c  # a kernel's local


def test_template_arguments_through_the_constants():
    assert valued(["half", "256", "NF4", "GELU + 1", "true", "kBlock"], TEXT) == ["half", "256", "9", "4", "true",
                                                                                    "kBlock"]
    assert valued(None, TEXT) is None and valued(["4", "float"], TEXT) == ["4", "float"]
