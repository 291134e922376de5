"""What every other package of ``corpus`` and ``trainer`` stands on: the error hierarchy (``errors``), the one way a
YAML file or a mapping becomes a typed dataclass (``typed_config``), the probe of optional dependencies
(``optional``), the one way to write a whole file (``atomic_write``) and the cache folders (``cache``). Imports
nothing of the project."""
