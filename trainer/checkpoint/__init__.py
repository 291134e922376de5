"""Checkpoints: atomic, sharded folders in Megatron's layout (``store``), their layout-independent entries
(``state_dict``: any TP × PP × DP layout loads any other's) and the export of one as a transformers Llama model
(``export``)."""
