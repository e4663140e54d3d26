"""The Hugging Face account behind a token: who it is, where it may write, and where the token is kept.

The token is checked with the Hub's ``/api/whoami-v2`` before it is stored or used (account name, role, fine-grained
write scopes), then kept in :class:`node.secret_store.SecretStore` under :data:`TOKEN_SECRET`: the OS keyring, or
the passphrase-encrypted file store where there is none. It is never written in plaintext or logged.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from node.errors import NodeError
from node.hub.errors import TOKENS_URL, as_node_error
from node.secret_store import PASSPHRASE_ENV, SecretStore, node_store  # noqa: F401 - PASSPHRASE_ENV re-exported

TOKEN_SECRET = "hf-token"


@dataclass(frozen=True)
class HubAccount:
    """Who a token belongs to and where it may write (from the Hub's ``/api/whoami-v2``)."""

    name: str
    fullname: str
    token_name: str
    role: str  # "read", "write" or "fineGrained"
    orgs: tuple[str, ...] = ()
    write_namespaces: tuple[str, ...] = ()  # users / orgs under which repos may be created and written
    write_repos: tuple[str, ...] = ()  # single repos a fine-grained token may write

    @property
    def can_write(self) -> bool:
        """Whether the token may create and write repos in the user's own namespace."""
        return self.name in self.write_namespaces

    def can_write_to(self, repo_id: str) -> bool:
        return repo_id in self.write_repos or repo_id.split("/", 1)[0] in self.write_namespaces


def validate_token(token: str, endpoint: str | None = None) -> HubAccount:
    """Ask the Hub whose token this is and what it may do; raises NodeError when it is rejected or unreachable."""
    from huggingface_hub import HfApi

    token = token.strip()
    if not token:
        raise NodeError("The Hugging Face token is empty.", hint=f"create one at {TOKENS_URL}", code="hub_no_token")
    try:
        info = HfApi(endpoint=endpoint).whoami(token=token)
    except Exception as exc:  # noqa: BLE001 - every failure becomes one clear NodeError
        raise as_node_error(exc, endpoint=endpoint, action="check the token") from None
    return parse_whoami(info)


def parse_whoami(info: Any) -> HubAccount:
    """Read the fields we rely on from a whoami-v2 answer, refusing anything malformed."""
    try:
        name = info["name"]
        token = info["auth"]["accessToken"]
        role = token["role"]
        if not isinstance(name, str) or not name or role not in ("read", "write", "fineGrained"):
            raise ValueError(f"name {name!r}, role {role!r}")
        orgs = tuple(str(org["name"]) for org in info.get("orgs") or [])
        namespaces: list[str] = []
        repos: list[str] = []
        if role == "write":
            namespaces = [name, *orgs]
        elif role == "fineGrained":
            for scope in (token.get("fineGrained") or {}).get("scoped") or []:
                if "repo.write" not in (scope.get("permissions") or []):
                    continue
                entity = scope["entity"]
                (namespaces if entity["type"] in ("user", "org") else repos).append(str(entity["name"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise NodeError(
            f"The Hub's answer about the token was not understood ({exc}).",
            hint="check the Hub endpoint setting; the default is https://huggingface.co",
            code="hub_bad_response",
        ) from None
    return HubAccount(
        name=name, fullname=str(info.get("fullname") or name), token_name=str(token.get("displayName") or ""),
        role=role, orgs=orgs, write_namespaces=tuple(namespaces), write_repos=tuple(repos),
    )


def require_write(account: HubAccount, repo_id: str | None = None) -> None:
    allowed = account.can_write_to(repo_id) if repo_id else account.can_write
    if allowed:
        return
    where = repo_id or f"your namespace {account.name!r}"
    why = "it is a read-only token" if account.role == "read" else "it has no write access there"
    raise NodeError(
        f"The Hugging Face token {account.token_name!r} of {account.name} cannot write to {where} ({why}).",
        hint=f"create a token with write access at {TOKENS_URL} (type 'Write', or fine-grained with "
        "'write access to contents of all repos' in your namespace) and log in again",
        code="hub_read_only",
    )


def token_store(data_dir: Path, passphrase: str | None = None) -> SecretStore:
    """The secret store holding the token (see :func:`node.secret_store.node_store`)."""
    return node_store(data_dir, passphrase)


def load_token(data_dir: Path, passphrase: str | None = None) -> str | None:
    return token_store(data_dir, passphrase).get(TOKEN_SECRET)


def login(data_dir: Path, token: str, *, endpoint: str | None = None, passphrase: str | None = None) -> HubAccount:
    """Check ``token`` with the Hub and store it; a read-only or rejected token raises NodeError, nothing stored."""
    account = validate_token(token, endpoint)
    require_write(account)
    token_store(data_dir, passphrase).set(TOKEN_SECRET, token.strip())
    return account


def logout(data_dir: Path) -> None:
    """Forget the stored token (deleting needs no passphrase)."""
    token_store(data_dir).delete(TOKEN_SECRET)
