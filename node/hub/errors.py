"""One clear NodeError for each way talking to the Hub fails: network, offline mode, token, quota, conflict, disk."""

from __future__ import annotations

import logging

from node.errors import NodeError

log = logging.getLogger(__name__)

TOKENS_URL = "https://huggingface.co/settings/tokens"


def as_node_error(exc: BaseException, *, endpoint: str | None, action: str) -> NodeError:
    """One clear message for each way talking to the Hub fails (network, auth, quota, conflict, server)."""
    import httpx2
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled, RepositoryNotFoundError

    root = _root_cause(exc)
    where = endpoint or _default_endpoint()
    if isinstance(root, NodeError):
        return root
    if isinstance(root, OfflineModeIsEnabled):
        return NodeError(f"Could not {action}: Hub access is switched off (HF_HUB_OFFLINE is set).",
                         hint="unset HF_HUB_OFFLINE and try again", code="hub_offline")
    if isinstance(root, (httpx2.TransportError, ConnectionError, TimeoutError)):
        return NodeError(
            f"Could not {action}: the Hugging Face Hub at {where} cannot be reached ({type(root).__name__}).",
            hint="check the internet connection and try again" + (
                "; training goes on meanwhile, and files already sent are not sent twice" if "upload" in action
                else ""), code="hub_unreachable",
        )
    if isinstance(root, HfHubHTTPError) and root.response is not None:
        status = root.response.status_code
        server = (root.server_message or "").strip()
        detail = f" The Hub said: {server}" if server else ""
        if _is_quota(status, server):
            return NodeError(f"Could not {action}: the account's storage quota is exhausted.{detail}",
                             hint="free space on the Hub or upgrade the account, then upload again", code="hub_quota")
        if status == 401:
            return NodeError(f"Could not {action}: the Hugging Face token was rejected (invalid or revoked).",
                             hint=f"create a new token at {TOKENS_URL} and log in again", code="hub_unauthorized")
        if status == 403:
            return NodeError(f"Could not {action}: the token is not allowed to do this.{detail}",
                             hint=f"use a token with write access to this repo ({TOKENS_URL})", code="hub_forbidden")
        if isinstance(root, RepositoryNotFoundError) or status == 404:
            return NodeError(f"Could not {action}: the repo does not exist or this token cannot see it.",
                             hint="check the repo name and that the token's account owns it", code="hub_not_found")
        if status in (409, 412):
            return NodeError(f"Could not {action}: the repo changed while we were uploading.{detail}",
                             hint="upload again; it continues from what was already sent", code="hub_conflict")
        if status == 429:
            return NodeError(f"Could not {action}: the Hub is rate-limiting requests.",
                             hint="wait a few minutes and try again", code="hub_rate_limited")
        return NodeError(f"Could not {action}: the Hub answered HTTP {status}.{detail}",
                         hint="try again later", code="hub_http_error")
    if isinstance(root, OSError):  # after HfHubHTTPError, which is an OSError too
        return NodeError(f"Could not {action}: reading the checkpoint failed ({root}).",
                         hint="check the disk holding the run folder", code="disk")
    text = str(root)
    if _is_quota(0, text):
        return NodeError(f"Could not {action}: the account's storage quota is exhausted ({text.strip()}).",
                         hint="free space on the Hub or upgrade the account, then upload again", code="hub_quota")
    log.warning("unexpected failure while trying to %s", action, exc_info=exc)
    return NodeError(f"Could not {action}: {type(root).__name__}: {text}", hint="see the node log",
                     code="hub_error")


def _root_cause(exc: BaseException) -> BaseException:
    """huggingface_hub wraps upload failures (RuntimeError from ...); find the one that says what went wrong."""
    seen = exc
    while isinstance(seen, RuntimeError) and seen.__cause__ is not None:
        seen = seen.__cause__
    return seen


def _is_quota(status: int, message: str) -> bool:
    lowered = message.lower()
    return status in (402, 413, 507) or "quota" in lowered or "storage limit" in lowered


def _default_endpoint() -> str:
    from huggingface_hub import constants

    return constants.ENDPOINT

