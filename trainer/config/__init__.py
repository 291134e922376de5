"""The run's configuration: one typed dataclass per concern (``schema``), named model shapes (``presets``) and the
layering of dataclass defaults → preset → YAML file → flags (``loading``). Each field carries its Megatron flag and
help, so the CLI, the YAML keys and the docs are one table."""
