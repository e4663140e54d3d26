"""Whether an exception from web3 is the contract refusing (a revert), whichever provider raised it, and its data.

Every provider says "the contract reverted" its own way: over HTTP and IPC web3 turns a JSON-RPC revert answer of
``eth_call`` / ``eth_estimateGas`` into ``ContractLogicError`` (or a subclass) with the revert data; a node that
refuses ``eth_sendRawTransaction`` answers with a JSON-RPC error that web3 raises as ``Web3RPCError``; the
in-process ``EthereumTesterProvider`` lets eth-tester's ``TransactionFailed`` through, its data only in the text.
The client asks :func:`revert_of` and nothing else, so "reverted" never turns into "the RPC failed" because one
provider spelled it differently.
"""

from __future__ import annotations

import ast
from typing import Any

from eth_abi import encode as abi_encode
from web3.exceptions import ContractLogicError, Web3RPCError

from node.chain.versions import Revert, decode_revert_data, selector

try:  # the in-process chain is an optional extra (devchain)
    from eth_tester.exceptions import TransactionFailed
except ImportError:  # pragma: no cover - depends on the installed extras
    TransactionFailed = None  # type: ignore[assignment,misc]

REVERT_CODE = 3  # the JSON-RPC error code geth, anvil and others give a revert with data


def revert_of(exc: BaseException) -> Revert | None:
    """The decoded revert when ``exc`` says the contract refused; None for anything else (a transport failure,
    a timeout, an RPC error that is no revert)."""
    if isinstance(exc, ContractLogicError):
        return _decoded(_hex_bytes(getattr(exc, "data", None)))
    if TransactionFailed is not None and isinstance(exc, TransactionFailed):
        return _decoded(tester_revert_data(exc))
    if isinstance(exc, Web3RPCError):
        error = (exc.rpc_response or {}).get("error") if isinstance(exc.rpc_response, dict) else None
        if not isinstance(error, dict):
            return None
        message = str(error.get("message") or "").lower()
        if error.get("code") == REVERT_CODE or "revert" in message:
            return _decoded(_hex_bytes(error.get("data")))
    return None


def tester_revert_data(exc: BaseException) -> bytes:
    """eth-tester's revert data: web3's tester provider raises it as the text "execution reverted: <data>", the data
    a bytes literal for a custom error or a panic and the plain reason for Error(string)."""
    text = str(exc.args[0]) if exc.args else ""
    reason = text.removeprefix("execution reverted").removeprefix(": ")
    if reason.startswith(("b'", 'b"')):
        try:
            value = ast.literal_eval(reason)
            if isinstance(value, bytes):
                return value
        except (ValueError, SyntaxError):
            pass
    if not reason:
        return b""
    return selector("Error(string)") + abi_encode(["string"], [reason])


def _hex_bytes(data: Any) -> bytes | None:
    """Revert data as the JSON-RPC error carries it: a 0x hex string, or a dict that holds one under "data"."""
    if isinstance(data, dict):
        data = data.get("data")
    if not isinstance(data, str) or not data.startswith("0x"):
        return None
    try:
        return bytes.fromhex(data[2:])
    except ValueError:
        return None


def _decoded(raw: bytes | None) -> Revert:
    return decode_revert_data(raw) if raw else Revert("empty")
