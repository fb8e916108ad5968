"""The broker's wire: kio entities in and out (``protocol``), the structural walk that bounds every size of a
request by its frame before kio decodes it (``frame_check``), and the hand-written Fetch and Produce response
encodings (``fetch_encoding``, ``produce_encoding``). Frames, headers and record batches are freshet.format's."""
