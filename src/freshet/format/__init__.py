"""The Kafka formats as bytes in, values out: no sockets, no files, nothing else of Freshet's imported
(the model: kio's ``serial`` package, tansu's ``sans-io`` crate). The log stores what it reads here, the
broker frames and checks requests with it, and the clients read record batches with it.

- ``record_batch``: magic v2 record batches: the 61-byte header, encoding, decoding, validation, CRC-32C.
- ``control``: transaction markers, the control batches that commit or abort a producer's transaction.
- ``compression``: the batch codecs (gzip, snappy, lz4, zstd).
- ``varint``: zigzag varints (inside records) and unsigned varints (protocol lengths and tags).
- ``framing``: a frame's size prefix, request and response headers, tagged-field sections.
- ``errors``: what each of them raises, all ``FormatError``.
"""
