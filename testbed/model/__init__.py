"""The paper's equations and the scheduler logic.

Both engines (flow simulator and emulated router) import from here; every equation
lives in exactly one function named after what it computes. The modules here are pure:
no I/O, no clock, no threads (tests/test_layers.py holds them to it). What the model
takes from outside lives in one room:

extensions/   schedulers and network models loaded by name (plugins, network_models),
              run under a deadline (guard: SIGALRM, threads), and the prefix cache
              compiled to native code (compiled_cache)
"""
