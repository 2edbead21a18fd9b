"""The OpenAPI v2 and v3 documents, built from the upstream definitions and the catalog."""
