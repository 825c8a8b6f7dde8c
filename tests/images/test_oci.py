"""ferry's registry client against a registry with token auth, as ECR's, GHCR's and Docker Hub's are."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from ferry.images.oci import Registry
from tests.flows.test_secrets_scan import TokenServer, start_registry_with_tokens


def test_parallel_work_on_several_repositories_keeps_one_token_per_repository(tmp_path) -> None:
    """A token server grants each token one repository's scope: threads on four repositories at once each keep
    their own (a token cached per host would be overwritten by another thread's, and its next request refused)."""
    tokens = TokenServer({"robot": "pw-1234567890"}).start()
    registry = start_registry_with_tokens(tmp_path / "registry", tokens)
    try:
        client = Registry(f"127.0.0.1:{registry.port}", insecure=True, username="robot", password="pw-1234567890")

        def look(i: int) -> list[str | None]:
            return [client.digest(f"team/repo{i}", "1") for _ in range(20)]

        with ThreadPoolExecutor(4) as pool:
            found = list(pool.map(look, range(4)))
    finally:
        registry.stop()
        tokens.stop()
    assert found == [[None] * 20] * 4, "every request answered (the tags are not there), none refused"
    assert len(tokens.issued) == 4 and tokens.refused == 0
