"""Tools used by the test suite (an App like any other)."""
