"""The test suite as a package, so shared helpers import as ``tests.support.<module>``."""
