"""A send hook installed into a namespace: packed sends that do not block the caller."""
