"""Drivers of other languages as real client processes ("agents"), behind the probes' `Client`.

spec.py says how one is installed, built and started; catalogue.py lists the shipped ones;
install.py puts one into leakcheck's cache; process.py runs one process and speaks its protocol
(docs/agent-protocol.md); client.py is the `Client` over it, with the processes each lane reuses.
"""
