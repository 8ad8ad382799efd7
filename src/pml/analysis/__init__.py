"""Static analysis of code snippets: parsing, normalised code hashes, and what a snippet uses."""
