"""How the apiserver holds its connections: header and idle deadlines, header size, request concurrency."""
