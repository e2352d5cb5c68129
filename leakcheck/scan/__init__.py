"""`leakcheck scan`: what a team's own application sends, read from its logs, statistics and migrations,
classified by session effect and mapped to the probes that measure it; and `--repo`, the pooler knobs a
repository sets, as `--driver-set` axes.

Modules: `inputs` (each input's kind, found from its content, and a streaming reader per kind), `classify`
(PostgreSQL's own parser, pglast: a statement's session effects), `workload` (the statements counted per
effect, transactions followed per session), `mapping` (effect -> probe ids and advice, as data), `verdicts`
(the probes' outcomes on the target cells: a results file, or measured now), `report` (terminal, Markdown,
HTML, JSON, JUnit: pure), `knobs` (a repository's settings -> driver-set axes), and `command` (what the CLI
calls).
"""
