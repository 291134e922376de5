"""Above the model: :func:`trainer.parallelize.apply.parallelize`, the one step from a model config to this rank's
trainable chunks (pipeline split → tensor parallel → precision → recompute → compile → data parallel), and what
it is made of: ``layout`` (which layouts a model fits, the stage split), ``compile``, ``pipeline`` (1F1B
schedules), ``data_parallel`` (gradient buckets, ZeRO-1, the global norm) and ``engine`` (one step's passes)."""
