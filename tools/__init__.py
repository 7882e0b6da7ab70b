"""Tools the tests and ``make`` targets run beside the product (not part of it)."""
