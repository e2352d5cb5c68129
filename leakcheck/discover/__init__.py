"""Leak discovery: hypothesis generates interleavings of session-state ops by clients A and B, runs
each through the pooler and through two direct sessions, and reports every difference as a shrunk,
replayable SQL script, sorted into findings an existing probe explains and new ones.

Modules: `ops` (the ops model), `render` (their SQL), `strategy` (hypothesis strategies), `execute`
(one sequence on two real clients, with proofs), `compare` (normalize, compare, check proofs),
`differential` (route versus reference), `engine` (hypothesis rounds), `findings` (what the rounds
keep), `examples` (the example database's key spaces), `known` (the mapping to probe ids), `report`
(scripts and summary), `options`, `command` (`leakcheck discover`), and `lab`, the one adapter to
leakcheck's backend.
"""
