"""A pipeline schedule whose point-to-point exchange is batched or not, chosen at run time."""
