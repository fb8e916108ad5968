"""Complex event processing and search on streams: the rule language (MATCH_RECOGNIZE with WITHIN and
absence), a pure-Python matcher, and stored queries matched against every new event (a percolator).
Pure Python: the Spark adapter lives in ``freshet.pipelines.cep``, the stored rules in a compacted topic
(``freshet.client.stored``)."""
