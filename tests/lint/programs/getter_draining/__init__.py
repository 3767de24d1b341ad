"""A pipeline schedule whose send and receive buffers live in one object, reached through a getter."""
