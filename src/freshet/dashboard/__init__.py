"""The web dashboard: topics, consumer groups, pipelines, live charts, and a Prometheus endpoint."""
