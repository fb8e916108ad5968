"""Groups: the classic consumer group protocol (``classic``: JoinGroup, SyncGroup, Heartbeat), KIP-848 consumer
groups (``consumer``), share groups (``share``, with ``share_partition``'s record locks), and committed offsets
(``offsets``, kept in __consumer_offsets)."""
