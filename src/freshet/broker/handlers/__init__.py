"""One module per API family. Each exposes ``APIS = {api_key: (min_version, max_version, handler)}``;
a handler takes the request context and the decoded request and returns a response dict, None
(no response), or an awaitable of either."""
