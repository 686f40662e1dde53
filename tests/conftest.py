"""Fixtures every test package can use: the corpus location, the cloud emulators and a
throwaway PostgreSQL server."""

pytest_plugins = ["tests.support.corpus", "tests.support.emulators", "tests.support.postgres"]
