"""Checkpoint shards pushed to a recovering peer over a ProcessGroup's own methods."""
