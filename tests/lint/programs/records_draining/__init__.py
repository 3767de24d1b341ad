"""A pipeline executor that receives the last stage's logits while the next batch runs."""
