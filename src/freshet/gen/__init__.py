"""Event generators (no Kafka here: they yield events; the CLI produces them)."""
