"""A local development chain: an in-process EVM (eth-tester / py-evm) served as JSON-RPC over HTTP on loopback (and,
on request, over an IPC socket as geth serves it).

Node processes reach it like any other RPC, so the code path under test is the one used against a real chain.
It needs the optional ``eth-tester`` package (``pip install -e ".[devchain]"``). Reverts are answered the way geth
and anvil answer them (code 3, the revert data in ``data``), so custom errors decode exactly as on a real chain.
The chain lives in memory: :meth:`stop` and :meth:`start` take the RPC away and bring it back with its state,
which is how the tests simulate an RPC outage.
"""

from __future__ import annotations

import json
import logging
import socketserver
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from node.chain.reverts import tester_revert_data

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 4 * 1024 * 1024
_PARSE_ERROR = {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "parse error"}}


class DevChain:
    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        try:
            from web3 import EthereumTesterProvider, Web3
        except ImportError as exc:  # pragma: no cover - depends on the installed extras
            raise RuntimeError('the development chain needs eth-tester: pip install -e ".[devchain]"') from exc
        self.w3 = Web3(EthereumTesterProvider())
        # eth-tester is not thread-safe: every request, over HTTP, IPC or through :attr:`w3` from any thread, holds it
        self._lock = threading.RLock()
        provider, request = self.w3.provider, self.w3.provider.make_request

        def locked_request(method, params):
            with self._lock:
                return request(method, params)

        provider.make_request = locked_request
        self._host, self._port = host, port
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._ipc: tuple[socketserver.ThreadingUnixStreamServer, threading.Thread] | None = None

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self._port}"

    @property
    def chain_id(self) -> int:
        return int(self.w3.eth.chain_id)

    @property
    def dev_accounts(self) -> list[str]:
        """Funded, unlocked accounts of the in-process chain (usable through :attr:`w3` only)."""
        return list(self.w3.eth.accounts)

    def fund(self, address: str, wei: int) -> None:
        with self._lock:
            tx = self.w3.eth.send_transaction({"from": self.w3.eth.accounts[0], "to": address, "value": wei})
            self.w3.eth.wait_for_transaction_receipt(tx)

    def start(self) -> DevChain:
        chain = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length") or 0)
                if length > MAX_REQUEST_BYTES:
                    self.send_error(413)
                    return
                try:
                    response = chain.answer(json.loads(self.rfile.read(length)))
                except ValueError:
                    response = _PARSE_ERROR
                body = json.dumps(response).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        self._server = ThreadingHTTPServer((self._host, self._port), Handler)
        self._port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="devchain-rpc", daemon=True)
        self._thread.start()
        return self

    def serve_ipc(self, path: str) -> str:
        """Answer JSON-RPC on a Unix socket at ``path`` too (web3's IPCProvider, as a local geth is reached);
        :meth:`stop` ends it with the HTTP endpoint."""
        chain = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                decoder, buffer = json.JSONDecoder(), ""
                while chunk := self.request.recv(65536):
                    buffer += chunk.decode("utf-8", "replace")
                    if len(buffer) > MAX_REQUEST_BYTES:
                        return
                    while buffer.strip():  # answer every complete request in the stream, keep the rest
                        try:
                            request, end = decoder.raw_decode(buffer.lstrip())
                        except ValueError:
                            break
                        buffer = buffer.lstrip()[end:]
                        self.request.sendall(json.dumps(chain.answer(request)).encode())

        server = socketserver.ThreadingUnixStreamServer(path, Handler)
        server.daemon_threads = True
        thread = threading.Thread(target=server.serve_forever, name="devchain-ipc", daemon=True)
        thread.start()
        self._ipc = (server, thread)
        return path

    def stop(self) -> None:
        """Stop answering RPC calls; the chain's state stays (start() serves it again on the same port)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None
        if self._ipc is not None:
            server, thread = self._ipc
            server.shutdown()
            server.server_close()
            thread.join(10)
            self._ipc = None

    def answer(self, request: Any) -> Any:
        """The JSON-RPC answer to one request or a batch."""
        if isinstance(request, list):
            return [self.handle(r) for r in request]
        return self.handle(request)

    def handle(self, request: Mapping[str, Any]) -> dict[str, Any]:
        request_id = request.get("id") if isinstance(request, Mapping) else None
        method, params = (request.get("method"), request.get("params") or []) if isinstance(request, Mapping) else (None, [])
        if not isinstance(method, str) or not isinstance(params, list):
            return {"jsonrpc": "2.0", "id": request_id, "error": {"code": -32600, "message": "invalid request"}}
        from eth_tester.exceptions import TransactionFailed

        try:
            with self._lock:
                result = self.w3.manager.request_blocking(method, params)
        except TransactionFailed as exc:
            error = {"code": 3, "message": "execution reverted", "data": "0x" + tester_revert_data(exc).hex()}
            return {"jsonrpc": "2.0", "id": request_id, "error": error}
        except Exception as exc:  # noqa: BLE001 - every failure becomes a JSON-RPC error for the client
            return {"jsonrpc": "2.0", "id": request_id, "error": {"code": -32000, "message": str(exc)[:500]}}
        return {"jsonrpc": "2.0", "id": request_id, "result": _to_rpc(result)}


def _to_rpc(value: Any) -> Any:
    """web3's Python values back to JSON-RPC's wire format: quantities and bytes as 0x hex."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return hex(value)
    if isinstance(value, (bytes, bytearray)):
        return "0x" + bytes(value).hex()
    if isinstance(value, Mapping):
        return {key: _to_rpc(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_rpc(item) for item in value]
    return value
