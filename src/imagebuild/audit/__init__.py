"""Installed packages against advisories (issue 42): what is stale or vulnerable in an image, each finding naming
its source and date, and nothing called clean that was not checked."""
