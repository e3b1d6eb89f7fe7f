"""Small utilities below every layer but the contract's errors: argument checks, devices,
memory estimates, foreign arrays, TensorDict construction, state dicts, the hang watchdog.

Import the modules by their full names; this package imports nothing itself.
"""
