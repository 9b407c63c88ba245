"""nvcc options for the tests that check only that a file compiles (no register, spill or stack figure read): the
front end (every C++ and template error) and ptxas (every PTX and resource error of the code it is given) run in full
on unoptimized code, `-Xcicc -O0 -Xptxas -O0`, in about a third of the time of `-O3` (0.9 s against 2.4 s for a row
expert). The tests that read ptxas's figures (spills, registers, stack) compile as the product does."""

CHECK_FLAGS = ["-Xcicc", "-O0", "-Xptxas", "-O0"]
