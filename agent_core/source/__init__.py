"""Reading the user's file: parse CUDA, find/parse/validate the tuning spec."""
