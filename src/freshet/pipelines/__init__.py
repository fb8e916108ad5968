"""Ready pipelines: each a pure DataFrame -> DataFrame function, plus a runner that wires source and sink."""
