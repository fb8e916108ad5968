/* A C Kafka client for the broker benchmarks: librdkafka with nothing in between, so the
 * figures measure the broker and not a Python client.
 *
 *   perf produce BOOTSTRAP TOPIC COUNT SIZE PARTITIONS    acks=all, linger.ms=5, round-robin partitions
 *   perf consume BOOTSTRAP TOPIC COUNT GROUP              one consumer in a group, from the earliest offset
 *
 * Prints one JSON object: records, seconds (first record in to last record out for produce:
 * from the first produce call until every delivery report; for consume: from the first record
 * received to the COUNT-th), and records per second. Built by benchmarks/broker_throughput.py
 * with the system's librdkafka (Debian's librdkafka-dev).
 */
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long delivered = 0, failed = 0;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *what, const char *why) {
    fprintf(stderr, "perf: %s: %s\n", what, why);
    exit(1);
}

static void set(rd_kafka_conf_t *conf, const char *key, const char *value) {
    char err[512];
    if (rd_kafka_conf_set(conf, key, value, err, sizeof err) != RD_KAFKA_CONF_OK) die(key, err);
}

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
    (void)rk; (void)opaque;
    if (m->err) failed++; else delivered++;
}

static int produce(const char *bootstrap, const char *topic, long count, int size, int partitions) {
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    set(conf, "bootstrap.servers", bootstrap);
    set(conf, "acks", "all");
    set(conf, "linger.ms", "5");
    set(conf, "enable.idempotence", "false");
    set(conf, "queue.buffering.max.messages", "2000000");
    set(conf, "queue.buffering.max.kbytes", "2097151");
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (!rk) die("producer", err);
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    char *value = malloc(size);
    for (int i = 0; i < size; i++) value[i] = 'a' + i % 26;
    double start = now();
    for (long i = 0; i < count; i++) {
        int partition = (int)((i / 10000) % partitions);
        while (rd_kafka_produce(rkt, partition, RD_KAFKA_MSG_F_COPY, value, size, NULL, 0, NULL) == -1) {
            if (rd_kafka_last_error() != RD_KAFKA_RESP_ERR__QUEUE_FULL)
                die("produce", rd_kafka_err2str(rd_kafka_last_error()));
            rd_kafka_poll(rk, 10);
        }
        if (i % 10000 == 0) rd_kafka_poll(rk, 0);
    }
    while (delivered + failed < count) rd_kafka_poll(rk, 50);
    double seconds = now() - start;
    printf("{\"records\": %ld, \"failed\": %ld, \"seconds\": %.3f, \"msgs_per_s\": %.0f}\n",
           delivered, failed, seconds, delivered / seconds);
    rd_kafka_topic_destroy(rkt);
    rd_kafka_destroy(rk);
    free(value);
    return failed ? 1 : 0;
}

static int consume(const char *bootstrap, const char *topic, long count, const char *group) {
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    set(conf, "bootstrap.servers", bootstrap);
    set(conf, "group.id", group);
    set(conf, "auto.offset.reset", "earliest");
    set(conf, "enable.auto.commit", "false");
    set(conf, "fetch.max.bytes", "52428800");
    /* librdkafka pauses fetching for fetch.queue.backoff.ms (default 1000) whenever its local queue
     * is briefly fuller than the application drains it: a broker that answers faster than the
     * application reads gets whole idle seconds. 10 ms, as benchmarks/broker_throughput.py's
     * Python consumer, so the figure is the broker's and not that pause. */
    set(conf, "fetch.queue.backoff.ms", "10");
    /* PERF_CONSUMER_CONFIG="key=value,key=value": more consumer settings, for experiments */
    const char *extra = getenv("PERF_CONSUMER_CONFIG");
    if (extra && *extra) {
        char *copy = strdup(extra), *save = NULL;
        for (char *kv = strtok_r(copy, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
            char *eq = strchr(kv, '=');
            if (!eq) die("PERF_CONSUMER_CONFIG", kv);
            *eq = 0;
            set(conf, kv, eq + 1);
        }
        free(copy);
    }
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
    if (!rk) die("consumer", err);
    rd_kafka_poll_set_consumer(rk);
    rd_kafka_topic_partition_list_t *topics = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(topics, topic, RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t e = rd_kafka_subscribe(rk, topics);
    if (e) die("subscribe", rd_kafka_err2str(e));
    rd_kafka_topic_partition_list_destroy(topics);
    long seen = 0, bytes = 0;
    double start = 0, limit = now() + 300;
    /* when each partition's first and last record came (for telling a late start from a slow read) */
    enum { MAXP = 64 };
    double first[MAXP] = {0}, last[MAXP] = {0};
    int partitions = 0;
    /* the clock is read once per 256 records or on a change of partition, not per record: a clock read per
       record was a fifth of this client's CPU (perf record), and the client is what a consume run is bound by */
    double t = now();
    int since = 0, previous = -1;
    while (seen < count && t < limit) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 1000);
        if (!m) {
            t = now();
            continue;
        }
        if (!m->err) {
            if (++since >= 256 || m->partition != previous || seen == 0) {
                t = now();
                since = 0;
                previous = m->partition;
            }
            if (seen == 0) start = t;
            seen++;
            bytes += m->len;
            if (m->partition >= 0 && m->partition < MAXP) {
                if (!first[m->partition]) first[m->partition] = t;
                last[m->partition] = t;
                if (m->partition + 1 > partitions) partitions = m->partition + 1;
            }
        }
        rd_kafka_message_destroy(m);
    }
    double seconds = now() - start;
    /* start and end on CLOCK_MONOTONIC, which every process shares: consumers run side by side are timed as one */
    printf("{\"records\": %ld, \"bytes\": %ld, \"seconds\": %.3f, \"msgs_per_s\": %.0f, \"start\": %.6f, "
           "\"end\": %.6f, \"partition_ms\": [", seen, bytes, seconds, seen / seconds, start, start + seconds);
    for (int p = 0; p < partitions; p++)
        printf("%s[%.1f, %.1f]", p ? ", " : "", first[p] ? (first[p] - start) * 1e3 : -1.0,
               last[p] ? (last[p] - start) * 1e3 : -1.0);
    printf("]}\n");
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return seen == count ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc == 7 && !strcmp(argv[1], "produce"))
        return produce(argv[2], argv[3], atol(argv[4]), atoi(argv[5]), atoi(argv[6]));
    if (argc == 6 && !strcmp(argv[1], "consume"))
        return consume(argv[2], argv[3], atol(argv[4]), argv[5]);
    fprintf(stderr, "usage: perf produce BOOTSTRAP TOPIC COUNT SIZE PARTITIONS | consume BOOTSTRAP TOPIC COUNT GROUP\n");
    return 2;
}
