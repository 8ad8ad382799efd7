"""Discovery: embeddings, a lexical index and the hybrid ranking behind ``pml_discover``."""
