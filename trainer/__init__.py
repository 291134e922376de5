"""blendforge's GPT trainer: ``trainer.run.loop.train(TrainConfig)`` is the whole of ``trainer run``. Packages, lowest
layer first (``tests/test_import_graph.py`` holds the code to that):

- ``errors``, ``config`` (typed configs, presets, YAML + flags), ``runtime`` (device, precision, RNG, stops);
- ``kernels`` (every hand-written Triton op with its formula in tensor code);
- ``parallel`` (below the model: process groups, TP collectives, the vocabulary-parallel loss);
- ``model`` (the Llama-style GPT and its layers), ``fp8`` (FP8 GEMM backends), ``optim``;
- ``parallelize`` (above the model: the one step from config to this rank's trainable chunks, and the step engine);
- ``checkpoint`` (layout-independent sharded checkpoints, export), ``run`` (build, loop, data, metrics).
"""
