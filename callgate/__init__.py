"""The composition root: the ``callgate`` command and the demo, the one place that wires all packages."""

__all__: list[str] = []
