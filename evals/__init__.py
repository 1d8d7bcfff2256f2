"""speclens evaluation helpers."""
