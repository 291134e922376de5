"""blendforge's compact 3D-parallel GPT trainer. See trainer/README.md for the module map."""
