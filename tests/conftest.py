"""Fixtures every test package can use: the corpus location, the cloud emulators (and the
Google token stand-in), a throwaway PostgreSQL server."""

pytest_plugins = [
    "tests.support.corpus",
    "tests.support.emulators",
    "tests.support.google_stand_in",
    "tests.support.postgres",
]
