"""The vendored files hold mixins, not tests: pytest collects nothing here (the testers in tests/models/ use them)."""

collect_ignore_glob = ["*.py"]
