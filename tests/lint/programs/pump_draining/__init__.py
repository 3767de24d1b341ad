"""A pipeline scheduler that pumps Python objects to the next stage without blocking."""
