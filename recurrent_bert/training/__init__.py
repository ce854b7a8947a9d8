"""Training machinery: optimisation (AdamW + schedule), distribution (strategy from
flags), the custom training loop, loss/metric sums and checkpoint layout/loading."""
