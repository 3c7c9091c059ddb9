"""Sample datasets for `recordbeam demo` and the docs' examples; not used by conversions."""
