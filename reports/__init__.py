"""Reports derived from run records: tables, curves, rankings, plots."""

from speclens.packages import check_own_packages

check_own_packages()
