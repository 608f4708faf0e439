"""Applications built on the library: end-to-end runs with their own outputs (plots, reports)."""
