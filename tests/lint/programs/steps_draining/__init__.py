"""A training driver that exchanges boundary rows with its neighbour every step, one batch per step."""
