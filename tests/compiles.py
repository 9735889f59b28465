"""Counting compiles in a test."""

import jax


class CompileCount:
    """Counts the compiles (lowerings: also when the persistent cache then supplies the executable)
    of functions whose name contains ``name``."""

    def __init__(self, name):
        self.name, self.count = name, 0

    def __enter__(self):
        jax.monitoring.register_event_duration_secs_listener(self._listen)
        return self

    def _listen(self, event, duration, **kwargs):
        if event == "/jax/core/compile/jaxpr_to_mlir_module_duration" and self.name in str(kwargs.get("fun_name", "")):
            self.count += 1

    def __exit__(self, *exc):
        jax.monitoring.unregister_event_duration_listener(self._listen)
