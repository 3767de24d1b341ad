"""A pipeline that posts each step's sends and receives as one batch."""
