"""Bodies in and out: content negotiation, protobuf, decoding into Go's types, field validation."""
