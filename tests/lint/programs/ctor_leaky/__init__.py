"""A pipeline that owns its in-flight sends and lends the list to the sender it builds."""
