"""The optimizer (``optimizer``: AdamW groups, clipping and the non-finite skip inside the update), our AdamW with
bf16 weights and moments (``adamw``) and the learning-rate schedule (``schedule``)."""
