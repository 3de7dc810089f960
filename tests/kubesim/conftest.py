"""kubesim fixtures come from kubesim/pytest_plugin.py, loaded by tests/conftest.py."""
