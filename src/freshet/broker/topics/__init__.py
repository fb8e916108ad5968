"""Topics: the registry of topics and partitions (``registry``), each topic config declared once
(``topic_config``: Kafka's ConfigDef), and the broker settings and topic overrides changed at run time
(``dynamic_config``)."""
