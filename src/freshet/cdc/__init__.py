"""Change data capture from PostgreSQL: logical replication (pgoutput) into Kafka-protocol topics."""
