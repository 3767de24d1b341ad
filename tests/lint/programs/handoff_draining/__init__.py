"""A pipeline stage that hands its list of in-flight sends to a helper that posts them."""
