"""Reads parbench's JSON output (docs/JSON.md) for the plots, the report and the regression gate.

- parbench_results.schema: what docs/JSON.md defines, for every reader: a file read and its schema
  version checked, time units, case names without Google Benchmark's suffixes, a case's fields.
  Standard library only, as ci/perf-gate needs.
- parbench_results.cases: the cases of one or more files with their statistics, set-ups and
  single-GPU references, for plots/plot.py and reports/make_report.py.

Nothing is imported here, so the gate loads the schema module alone.
"""
