"""A training run: ``build`` assembles it from the config, ``state`` holds it, ``loop`` trains it (``train(config)``
is ``trainer run``), ``resume`` saves and restores it, ``data`` bridges to the corpus loaders, ``metrics`` and
``profiling`` report on it."""
