"""Root conftest: the project's own fixtures live in tests/; pytester for plugin tests."""

pytest_plugins = ["pytester"]
