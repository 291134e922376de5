"""What every other package of ``corpus`` and ``trainer`` stands on: the error hierarchy (``errors``), the one way a
YAML file or a mapping becomes a typed dataclass (``typed_config``) and the probe of optional dependencies
(``optional``). Imports nothing of the project."""
