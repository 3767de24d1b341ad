"""Sequence-parallel attention whose gradient all-to-alls overlap with the backward pass."""
