"""Agent backend tests (a package, so their helpers never shadow other test dirs)."""
