"""Events in and out without a Kafka client: HTTP (Confluent REST Proxy v2/v3 compatible, browser beacons),
syslog (RFC 5424 / RFC 3164 over UDP and TCP), StatsD over UDP; webhooks out. One bounded buffer in front of
the log decides, per endpoint, what happens when the log is slower than the senders: answer "retry later"
(HTTP 429/503 with Retry-After), stop reading (TCP), or drop and count (UDP)."""
