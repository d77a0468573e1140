"""transformers' own common model-test utilities, vendored at transformers v5.23.0 (see README.md)."""
