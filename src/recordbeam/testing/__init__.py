"""Sample datasets for the demo, tests and benchmarks; not used by conversions."""
