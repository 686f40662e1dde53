"""Fixtures every test package can use: the corpus location and the cloud emulators."""

pytest_plugins = ["tests.support.corpus", "tests.support.emulators"]
