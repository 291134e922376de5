"""A training run: ``build`` assembles it from the config, ``state`` holds it, ``loop`` trains it (``train(config)``
is ``trainer run``), ``resume`` saves and restores it, ``data`` bridges to the corpus loaders, ``metrics``,
``telemetry`` (per source) and ``profiling`` report on it, ``curves`` plots its metrics file back."""
