"""Reports derived from run records: tables, curves, rankings, plots."""
