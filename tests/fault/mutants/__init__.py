"""History with exactly one guard removed, for the fault checker's mutation runs: the
mutations and how they are built (mutations.py) and the mutant history process
(history.py). Nothing is imported here, so `python -m tests.fault.mutants.history` imports
grpc's settings (ratchet.libs.rpc.grpc_env) before anything loads grpc."""
