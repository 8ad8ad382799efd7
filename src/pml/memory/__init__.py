"""What PML remembers for a person: facts, their sensitivity, and consent (SPEC §13)."""
