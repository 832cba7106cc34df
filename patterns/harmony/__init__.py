"""Harmony: true peer networks that speak ZRE v2 (Zyre, pyre)."""
