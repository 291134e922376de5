"""Thin click skins over the ``corpus`` and ``trainer`` libraries (no logic lives here)."""
