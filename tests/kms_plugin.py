"""A small KMS v2 plugin for tests: `v2.KeyManagementService` on a unix socket, served by grpcio.

It wraps data keys with AES-GCM under a key-encryption key derived from the key ID, so a plugin
restarted with a new `--key-id` still unwraps what the old one wrapped (as a real KMS keeps old key
versions). It counts its Decrypt calls in `<socket>.decrypts`, so tests can see the DEK cache work.
Run: python -m tests.kms_plugin SOCKET --key-id ID
"""

from __future__ import annotations

import argparse
import hashlib
import os
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from apiserver.storage.kms import decode, decode_map, encode


def _kek(key_id: str) -> AESGCM:
    return AESGCM(hashlib.sha256(b"pyk8s-test-kek:" + key_id.encode()).digest())


def serve(socket_path: str, key_id: str) -> None:
    decrypts = Path(socket_path + ".decrypts")
    decrypts.write_text("0")
    lock = threading.Lock()

    def status(request: bytes, context: grpc.ServicerContext) -> bytes:
        return encode({1: "v2", 2: "ok", 3: key_id})

    def encrypt(request: bytes, context: grpc.ServicerContext) -> bytes:
        plaintext = bytes(decode(request).get(1, [b""])[0])  # type: ignore[arg-type]
        nonce = os.urandom(12)
        return encode({1: nonce + _kek(key_id).encrypt(nonce, plaintext, None), 2: key_id,
                       3: {"kms.example.com/plugin": b"pyk8s-test"}})

    def decrypt(request: bytes, context: grpc.ServicerContext) -> bytes:
        fields = decode(request)
        ciphertext = bytes(fields.get(1, [b""])[0])  # type: ignore[arg-type]
        wanted = bytes(fields.get(3, [b""])[0]).decode()  # type: ignore[arg-type]
        if decode_map(fields.get(4, [])).get("kms.example.com/plugin") != b"pyk8s-test":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "annotations were not passed back")
        with lock:
            decrypts.write_text(str(int(decrypts.read_text()) + 1))
        return encode({1: _kek(wanted).decrypt(ciphertext[:12], ciphertext[12:], None)})

    def raw(fn):  # type: ignore[no-untyped-def]
        return grpc.unary_unary_rpc_method_handler(fn, request_deserializer=None, response_serializer=None)

    handler = grpc.method_handlers_generic_handler(
        "v2.KeyManagementService", {"Status": raw(status), "Encrypt": raw(encrypt), "Decrypt": raw(decrypt)})
    server = grpc.server(ThreadPoolExecutor(4))
    server.add_generic_rpc_handlers((handler,))
    Path(socket_path).unlink(missing_ok=True)
    server.add_insecure_port(f"unix://{socket_path}")
    server.start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    server.stop(1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("socket")
    parser.add_argument("--key-id", default="key-1")
    args = parser.parse_args()
    serve(args.socket, args.key_id)


if __name__ == "__main__":
    main()
