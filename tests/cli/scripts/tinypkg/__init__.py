"""A package whose training module runs under -m."""
