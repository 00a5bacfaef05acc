"""Tools that render the docs from the committed runs.

- ``readme_tables``: the README's and docs' tables rendered from the run JSON
  (``python -m benchmarks.tools.readme_tables --write``; checked by a test).
- ``hostile_table``: hostile input through every public door, tabulated
  (``python -m benchmarks.tools.hostile_table``; docs/reliability_inputs.md).
"""
