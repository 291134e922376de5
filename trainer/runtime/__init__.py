"""Process-level concerns of a run: the device and compute precision (``device``), random number generators
(``rng``), clean stops on signals and deadlines (``stops``) and when Python collects garbage (``collection``)."""
