"""Benchmark scripts (run one as `.venv/bin/python bench/NAME.py --help`) and their harness."""
