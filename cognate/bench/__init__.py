"""What the benchmark scripts in scripts/ share: their matrix sets, which data of a shipped
model a matrix was, and the oracle / fixed-config summary of a timed grid.

Library code that only benchmarks use lives here, so no script imports another script."""
