"""The gate: baselines, expectations, the judge's one rule, the record, and the upgrade diff."""
