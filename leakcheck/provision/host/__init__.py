"""The host: processes and their children, the cache, locks, ports, users, sweeps, shared memory."""
