"""Test doubles that run the real client and informers: the in-memory apiserver of fakeapi."""
