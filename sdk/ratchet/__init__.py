"""Ratchet SDK."""
