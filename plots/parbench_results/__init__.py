"""Reads parbench's JSON output (docs/JSON.md) for the plots, the report and the regression gate.

- parbench_results.schema: what docs/JSON.md defines, for every reader: a file read and its schema
  version checked, time units, case names without Google Benchmark's suffixes.
  Standard library only.
- parbench_results.cases: the cases of one or more files with their statistics, set-ups and
  single-GPU references, for the figures and reports/make_report.py.
- parbench_results.facts: the context's counter table and schedule facts (schema 1.8.0), and the
  tables for older files. Standard library only.
- parbench_results.paired_runs: ci/paired-runs, processes run in adjacent pairs and their ratios.
- parbench_results.suite: runs declared as data (benchmarks/suites/*.toml), checked and run.
- parbench_results.headline: the headline table of the README and docs/RESULTS.md, from committed JSON.
- parbench_results.plot: the figures (`parbench-plot`), in one look (parbench_results.styles).
- parbench_results.pipeline_timeline: a traced pipeline step's spans and bubbles
  (`parbench-timeline`); parbench_results.timeline_plot draws them beside the simulator's.
- parbench_results.perf_gate: the regression gate behind ci/perf-gate (docs/PERF_GATE.md), on
  the schema module and the standard library alone.

Nothing is imported here, so the gate loads without the rest.
"""
