"""Planted secrets never leave ferry (issue 18, item 6).

Every credential ferry takes is planted with a fresh random value that the server it is for really checks: moto's S3
and IAM APIs with authentication on (access keys of IAM users made here; a user whose policy denies writes), moto's
ECR token (never pulled from, only handed to the tools), Azurite's account SAS (signed with its public key) and
account key, a registry with htpasswd logins, a Kubernetes bearer token in the kubeconfig (the control plane's API
server takes it), and a Kubernetes Secret's values (in the manifests, and the one the cluster held). A second
registry takes bearer tokens only, as ECR's, GHCR's, Docker Hub's and Harbor's do: its token server (written here,
its JWTs signed with a key made here) checks the logins, and every token it issues is looked for too. Each
credential is given once through environment variables (`*_env`) and once through Prefect Secret blocks
(`*_secret`). The installed `ferry` runs as a user runs it: `plan show`, `run` of every phase (console, and
`--log-format json`), a run that a denied request fails (plain, and with FERRY_DEBUG's tracebacks), `iam explain`,
`deploy`, `status`, `rollback --dry-run`, `serve` with a run started from its deployment and a run waiting for
`approve` (both copying and building images to the bearer registry), `sync --report` (moto to Azurite, a presigned
URL made for the multipart object) and a sync with a wrong secret. `ferry ui` takes no plan and no credential: it is
not run here.

Then every output is scanned for each secret in the forms it may take (as is, URL-quoted, JSON-escaped, base64
at any alignment, and the alphanumeric runs the other encodings keep): stdout and stderr; every file under the
state directories (SQLite files as bytes) and the sync reports; the files ferry and its tools left in their
TMPDIR and any new file in the system's temporary folders; the command lines of ferry and of every process under
it (sampled from /proc while it runs, and skopeo's argv recorded by a wrapper on PATH); from the Prefect server,
the runs' logs, artifacts, states, task runs and events, the deployments and the work pool, and the server's
database file itself. The Secret the cluster held may be in one place only: the rollback's snapshot (mode 0600).

A canary secret is written on purpose to one place of each kind, and a canary bearer token to an auth file; the
scan must find them there, or it proves nothing. Azure is reached through `ferry sync` only: in a plan, preflight
cannot resolve an Azurite endpoint (`AzureBlobConnector.network_host()` answers "127.0.0.1:PORT/devstoreaccount1"),
so the plans' storage is moto.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import gzip
import hashlib
import io
import json
import os
import re
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, quote_plus, unquote, urlencode, urljoin

import pytest

from tests.support import AZURITE_ACCOUNT, AZURITE_KEY, FERRY, Server, _wait_port, free_port, start_moto

CHANNELS = ("env", "secret")  # credentials as environment variables, then as Prefect Secret blocks
SNAPSHOTTED = "kubernetes Secret value the cluster held before"
MiB = 1 << 20


# -- the scanner -------------------------------------------------------------------------------------------------
def forms(value: str, runs: bool = True) -> dict[str, bytes]:
    """The ways value may be written out: as is, URL-quoted, JSON-escaped, in base64 at each of the three
    alignments it can take inside a longer base64 text (standard and URL-safe alphabets), and each run of 12 or
    more letters and digits, which every one of those encodings but base64 keeps as it is (unless runs is false:
    a value made of common parts, such as moto's ECR token, is looked for whole)."""
    raw = value.encode()
    quoted = quote(value, safe="")
    found = {
        "as is": raw,
        "URL-quoted": quoted.encode(),
        "URL-quoted, '/' kept": quote(value, safe="/").encode(),
        "URL-quoted, lower-case escapes": re.sub(r"%[0-9A-F]{2}", lambda m: m.group().lower(), quoted).encode(),
        "form-quoted": quote_plus(value).encode(),
        "URL-quoted twice": quote(quoted, safe="").encode(),
        "JSON-escaped": json.dumps(value)[1:-1].encode(),
        "JSON-escaped, '/' too": json.dumps(value)[1:-1].replace("/", "\\/").encode(),
    }
    for offset in range(3):
        text = base64.b64encode(b"\0" * offset + raw)
        # Only the characters made of the value's bits alone: neither the prefix nor the padding touches them.
        core = text[-(-8 * offset // 6) : 8 * (offset + len(raw)) // 6]
        found[f"base64 at offset {offset}"] = core
        found[f"URL-safe base64 at offset {offset}"] = core.replace(b"+", b"-").replace(b"/", b"_")
    for run in re.findall(rb"[A-Za-z0-9]{12,}", raw) if runs else []:
        found[f"its run {run[:4].decode()}..."] = run
    return {label: needle for label, needle in found.items() if len(needle) >= 12}


class Scanner:
    """Named secrets, and the outputs to look for them in (where, bytes).

    A shared secret (Azurite's public key, moto's fixed ECR token) may be in what other tests write: it is looked
    for in ferry's outputs only, not in shared places (the system's temporary folders, the Prefect database).
    """

    def __init__(self) -> None:
        self.needles: dict[bytes, tuple[str, str]] = {}  # needle -> (secret, form)
        self.sources: list[tuple[str, bytes, bool]] = []  # (where, data, shared with other processes)
        self.secrets: dict[str, str] = {}
        self.shared: set[str] = set()

    def plant(self, name: str, value: str, runs: bool = True, shared: bool = False) -> str:
        """Record value as the secret name; returns it, to be handed to ferry or the server."""
        assert value not in self.secrets.values(), "every planted value is unique"
        self.secrets[name] = value
        if shared:
            self.shared.add(name)
        for label, needle in forms(value, runs).items():
            self.needles.setdefault(needle, (name, label))
        return value

    def add(self, where: str, data: bytes | str, shared: bool = False) -> None:
        self.sources.append((where, data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data, shared))

    def add_file(self, path: Path, where: str | None = None, limit: int = 256 * MiB, shared: bool = False) -> bool:
        try:
            if not path.is_file() or path.is_symlink() or path.stat().st_size > limit:
                return False
            self.add(where or str(path), path.read_bytes(), shared)
        except OSError:  # gone since it was listed, or not ours to read
            return False
        return True

    def add_tree(self, root: Path, label: str) -> int:
        count = 0
        for path in sorted(root.rglob("*")):
            count += self.add_file(path, f"{label}/{path.relative_to(root)}")
        return count

    def findings(self) -> dict[tuple[str, str], list[str]]:
        """(where, which secret) -> the forms it was found in, for every secret found in every source."""
        found: dict[tuple[str, str], list[str]] = {}
        for where, data, shared in self.sources:
            for needle, (name, form) in self.needles.items():
                if not (shared and name in self.shared) and data.find(needle) >= 0:
                    found.setdefault((where, name), []).append(form)
        return found

    @property
    def size(self) -> int:
        return sum(len(data) for _, data, _ in self.sources)


# -- command lines of ferry's process tree -----------------------------------------------------------------------
class ProcessTree:
    """Samples /proc for the command line of every process descended from a root pid, while it runs."""

    def __init__(self, root: int, interval: float = 0.05):
        self.root = root
        self.interval = interval
        self.seen: dict[int, str] = {}  # pid -> its command line (arguments joined by spaces)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    @staticmethod
    def _parents() -> dict[int, int]:
        parents = {}
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                with contextlib.suppress(OSError, IndexError, ValueError):
                    stat = Path(entry.path, "stat").read_text()
                    parents[int(entry.name)] = int(stat.rpartition(")")[2].split()[1])
        return parents

    def _sample(self) -> None:
        while not self._done.is_set():
            parents = self._parents()
            for pid in parents:
                ancestor = pid
                while ancestor not in (self.root, 0, 1) and ancestor in parents:
                    ancestor = parents[ancestor]
                if ancestor == self.root:
                    with contextlib.suppress(OSError):
                        argv = Path(f"/proc/{pid}/cmdline").read_bytes()
                        if argv:
                            self.seen.setdefault(pid, argv.replace(b"\0", b" ").decode(errors="replace"))
            self._done.wait(self.interval)

    def wait_for(self, text: str, timeout: float = 30) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(text in line for line in self.seen.values()):
                return True
            time.sleep(self.interval)
        return False

    def stop(self) -> dict[int, str]:
        self._done.set()
        self._thread.join(timeout=10)
        return self.seen


# -- servers that check the credentials --------------------------------------------------------------------------
def bcrypt_hash(password: str) -> str | None:
    """An htpasswd bcrypt hash (the registry takes no other kind), from the C library's crypt; None without it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            import crypt
        except ImportError:  # Python 3.13 dropped the module: the registry then takes anonymous pushes
            return None
    hashed = crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16))
    return hashed if hashed and hashed.startswith("$2") else None


def start_registry_with_logins(work: Path, logins: dict[str, str]) -> tuple[Server, bool]:
    """Debian's docker-registry asking every request for one of logins (htpasswd), if this Python can hash them;
    (the server, whether it checks the logins)."""
    work.mkdir(parents=True)
    hashes = {user: bcrypt_hash(password) for user, password in logins.items()}
    checks = bool(hashes) and all(hashes.values())
    auth = ""
    if checks:
        (work / "htpasswd").write_text("".join(f"{user}:{h}\n" for user, h in hashes.items()))
        auth = f"auth:\n  htpasswd:\n    realm: ferry-scan\n    path: {work / 'htpasswd'}\n"
    return _serve_registry(work, auth), checks


def start_registry_with_tokens(work: Path, tokens: TokenServer) -> Server:
    """Debian's docker-registry taking only the bearer tokens of tokens (distribution's token auth: a 401 whose
    challenge names the token server's realm, service and the scope asked for)."""
    work.mkdir(parents=True)
    (work / "tokens.pem").write_bytes(tokens.certificate_pem)
    auth = (
        f"auth:\n  token:\n    realm: {tokens.realm}\n    service: {tokens.service}\n    issuer: {tokens.issuer}\n"
        f"    rootcertbundle: {work / 'tokens.pem'}\n"
    )
    return _serve_registry(work, auth)


def _serve_registry(work: Path, auth: str) -> Server:
    port = free_port()
    (work / "config.yml").write_text(
        f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {work / 'data'}\n  delete:\n    enabled: true\n"
        f"http:\n  addr: 127.0.0.1:{port}\nlog:\n  level: error\n{auth}"
    )
    proc = subprocess.Popen(
        ["docker-registry", "serve", str(work / "config.yml")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    _wait_port(port, proc, "docker-registry")
    return Server(proc=proc, port=port)


class TokenServer:
    """A registry's token server, as ECR's, GHCR's, Docker Hub's and Harbor's registries send clients to: a GET of
    the realm with a Basic login that is one of logins gets a JWT (RS256, its certificate in the `x5c` header, which
    distribution checks against its rootcertbundle) granting the scopes asked for; any other login gets a 401.

    Every token issued is kept (the token, and the User-Agent it went to), to be looked for as the logins are.
    """

    service = "ferry-scan-registry"
    issuer = "ferry-scan-tokens"

    def __init__(self, logins: dict[str, str]):
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import rsa
        from cryptography.x509.oid import NameOID

        self.logins = logins
        self.issued: list[tuple[str, str]] = []  # (token, User-Agent)
        self.refused = 0
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, self.issuer)])
        now = datetime.datetime.now(datetime.UTC)
        certificate = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .sign(self._key, hashes.SHA256())
        )
        self.certificate_pem = certificate.public_bytes(serialization.Encoding.PEM)
        self._x5c = base64.b64encode(certificate.public_bytes(serialization.Encoding.DER)).decode()
        self._server = None

    @property
    def realm(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/token"

    def token(self, user: str, scopes: list[str]) -> str:
        """A token for user granting scopes (`repository:NAME:ACTION,...`), signed as the registry expects."""
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        def encoded(data: dict) -> str:
            return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

        access = []
        for scope in scopes:
            kind, _, rest = scope.partition(":")
            name, _, actions = rest.rpartition(":")
            access.append({"type": kind, "name": name, "actions": [a for a in actions.split(",") if a]})
        now = int(time.time())
        claims = {
            "iss": self.issuer, "sub": user, "aud": self.service, "exp": now + 300, "nbf": now - 10, "iat": now,
            "jti": secrets.token_hex(16), "access": access,
        }  # fmt: skip
        signed = f"{encoded({'typ': 'JWT', 'alg': 'RS256', 'x5c': [self._x5c]})}.{encoded(claims)}"
        signature = self._key.sign(signed.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signed}.{base64.urlsafe_b64encode(signature).rstrip(b'=').decode()}"

    def start(self) -> TokenServer:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        from urllib.parse import parse_qs, urlsplit

        tokens = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                query = parse_qs(urlsplit(self.path).query)
                user, password = "", ""
                with contextlib.suppress(ValueError):  # no Basic login, or not one
                    basic = self.headers.get("Authorization", "").removeprefix("Basic ")
                    user, _, password = base64.b64decode(basic, validate=True).decode().partition(":")
                if not password or tokens.logins.get(user) != password or query.get("service") != [tokens.service]:
                    tokens.refused += 1
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="ferry-scan-tokens"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                token = tokens.token(user, query.get("scope", []))
                tokens.issued.append((token, self.headers.get("User-Agent", "")))
                body = json.dumps({"token": token, "access_token": token, "expires_in": 300}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:  # the test's output is the scan's, not a request log
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="token-server", daemon=True).start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def push_image(host: str, repository: str, tag: str, env: list[str]) -> None:
    """A one-layer OCI image (its config's Env as given) pushed to an anonymous registry over its HTTP API."""
    tar = io.BytesIO()
    with tarfile.open(fileobj=tar, mode="w") as archive:
        info = tarfile.TarInfo("hello")
        info.size = 6
        archive.addfile(info, io.BytesIO(b"hello\n"))
    layer = gzip.compress(tar.getvalue(), mtime=0)
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Env": env},
            "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(tar.getvalue()).hexdigest()]},
        }
    ).encode()
    base = f"http://{host}/v2/{repository}"

    def blob(data: bytes) -> str:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        with urllib.request.urlopen(urllib.request.Request(f"{base}/blobs/uploads/", method="POST")) as started:
            location = urljoin(base, started.headers["Location"])
        separator = "&" if "?" in location else "?"
        put = urllib.request.Request(f"{location}{separator}digest={digest}", data=data, method="PUT")
        put.add_header("Content-Type", "application/octet-stream")
        urllib.request.urlopen(put).close()
        return digest

    layer_digest, config_digest = blob(layer), blob(config)
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": len(config),
        },
        "layers": [
            {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer_digest, "size": len(layer)}
        ],
    }
    put = urllib.request.Request(f"{base}/manifests/{tag}", data=json.dumps(manifest).encode(), method="PUT")
    put.add_header("Content-Type", manifest["mediaType"])
    urllib.request.urlopen(put).close()


def enforce_moto_auth(moto: Server) -> None:
    """From now on moto checks every request's signature against its IAM users' keys and policies."""
    request = urllib.request.Request(
        f"{moto.endpoint}/moto-api/reset-auth", data=b"0", method="POST", headers={"Content-Type": "text/plain"}
    )
    urllib.request.urlopen(request).close()


def moto_user(moto: Server, name: str, actions: list[str], deny: list[str] = ()) -> tuple[str, str]:
    """An IAM user allowed actions (and denied deny); its new access key (id, secret)."""
    iam = moto.client("iam")
    statements = [{"Effect": "Allow", "Action": actions, "Resource": "*"}]
    if deny:
        statements.append({"Effect": "Deny", "Action": list(deny), "Resource": "*"})
    iam.create_user(UserName=name)
    iam.put_user_policy(
        UserName=name,
        PolicyName="scan",
        PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": statements}),
    )
    key = iam.create_access_key(UserName=name)["AccessKey"]
    return key["AccessKeyId"], key["SecretAccessKey"]


def s3_as(moto: Server, key: tuple[str, str]):
    """A boto3 S3 client of moto signing with key (id, secret)."""
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=moto.endpoint,
        region_name="us-east-1",
        aws_access_key_id=key[0],
        aws_secret_access_key=key[1],
    )


def account_sas(permission: str) -> str:
    """An account SAS for Azurite's blob service, signed with its (public) key: a derived secret, unique by its
    expiry."""
    from azure.storage.blob import AccountSasPermissions, ResourceTypes, generate_account_sas

    expiry = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=2, seconds=secrets.randbelow(36000))
    return generate_account_sas(
        AZURITE_ACCOUNT,
        account_key=AZURITE_KEY,
        resource_types=ResourceTypes(service=True, container=True, object=True),
        permission=AccountSasPermissions.from_string(permission),
        expiry=expiry,
    )


# -- running ferry as a user does --------------------------------------------------------------------------------
@dataclass
class Ran:
    argv: list[str]
    code: int
    out: str
    err: str
    tree: dict[int, str] = field(default_factory=dict)
    seconds: float = 0.0


class Running:
    """`ferry ARGS` while it runs (a server, a run waiting for its approval): its output read as it comes, so the
    test acts on what it says; finish() ends it and gives what it printed."""

    def __init__(self, argv: list[str], proc: subprocess.Popen, tree: ProcessTree | None):
        self.argv, self.proc, self.tree = argv, proc, tree
        self.started = time.monotonic()
        self.out: list[str] = []
        self.err: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, args=(stream, lines), daemon=True)
            for stream, lines in ((proc.stdout, self.out), (proc.stderr, self.err))
        ]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _read(stream, lines: list[str]) -> None:
        for line in stream:
            lines.append(line)

    def wait_for(self, pattern: str, timeout: float = 120) -> re.Match | None:
        """The first match of pattern in what it has printed (stdout, then stderr), once there is one; None if it
        ended (or timeout passed) first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            done = self.proc.poll() is not None and not any(r.is_alive() for r in self._readers)
            if found := re.search(pattern, "".join(self.out) + "".join(self.err)):
                return found
            if done:
                return None
            time.sleep(0.2)
        return None

    def finish(self, sig: int | None = None, timeout: float = 240) -> Ran:
        """Send sig (if any), then what it printed once it has ended (killed after timeout)."""
        if sig is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            for reader in self._readers:
                reader.join(timeout=10)
            seen = self.tree.stop() if self.tree else {}
        seconds = time.monotonic() - self.started
        return Ran(self.argv, self.proc.returncode, "".join(self.out), "".join(self.err), seen, seconds)


@dataclass
class World:
    root: Path
    env: dict[str, str]
    scanner: Scanner
    ran: list[Ran] = field(default_factory=list)

    def start(self, *args: str, watch: bool = False, env: dict[str, str] | None = None) -> Running:
        """`ferry ARGS` started as its own process; with watch, the command lines of its process tree sampled
        while it runs. Its result joins the others' once finished()."""
        proc = subprocess.Popen(
            [FERRY, *args],
            cwd=self.root,
            env={**self.env, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        return Running(["ferry", *args], proc, ProcessTree(proc.pid) if watch else None)

    def finished(self, running: Running, sig: int | None = None) -> Ran:
        ran = running.finish(sig)
        print(f"`{' '.join(ran.argv)}`: exit {ran.code} in {ran.seconds:.1f} s, {len(ran.tree)} processes sampled")
        self.ran.append(ran)
        return ran

    def ferry(self, *args: str, watch: bool = False, env: dict[str, str] | None = None) -> Ran:
        """`ferry ARGS` as its own process, to its end (as start(), then finished())."""
        return self.finished(self.start(*args, watch=watch, env=env))

    def together(self, *commands: tuple[str, ...], watch: bool = False) -> list[Ran]:
        """Commands that share no state, run at once (each as ferry()); their results in order."""
        with ThreadPoolExecutor(max_workers=len(commands)) as pool:
            return list(pool.map(lambda args: self.ferry(*args, watch=watch), commands))


PLAN = """\
name: {name}
source:
  storage: 'src://{bucket}/data'
  registry: 127.0.0.1:{src_registry}/ml
  iam:
    aws:
      endpoint_url: {moto}
      credentials: {{access_key_id_{ch}: {iam_key}, secret_access_key_{ch}: {iam_secret}}}
target:
  profile: meta-compute
  storage: 'dst://{target_bucket}/{name}'
  registry: 127.0.0.1:{tgt_registry}/{name}
  kubernetes_version: "1.30"
  cluster: {{context: meta-eu, namespace: {name}, kubeconfig: kubeconfig}}
profiles:
  src:
    type: s3
    endpoint_url: {moto}
    min_part_size: 262144
    credentials: {{access_key_id_{ch}: {src_key}, secret_access_key_{ch}: {src_secret}}}
  dst:
    type: s3
    endpoint_url: {moto}
    min_part_size: 262144
    credentials: {{access_key_id_{ch}: {dst_key}, secret_access_key_{ch}: {dst_secret}}}
phases:
  iam: {{namespace: {name}}}
  data_sync: {{threads: 4, part_size: 256K, multipart_threshold: 512K}}
  images:
    copy: ["tool:1"]
    auth:
      "127.0.0.1:{tgt_registry}": {{username_{ch}: {registry_user}, password_{ch}: {registry_password}}}
      # Never pulled from: its token (GetAuthorizationToken on moto) only goes into the tools' auth file.
      "{ecr_host}":
        access_key_id_{ch}: {ecr_key}
        secret_access_key_{ch}: {ecr_secret}
        ecr_endpoint_url: {moto}
  manifests:
    sources: [k8s/]
    namespaces: {{ml-train: {name}}}
  golive:
    checkpoint: {{size: 256K, shards: 2, threads: 2}}
    nodes: {{driver: 550.54.15}}
    gpu_probe: false
gates:
  iam: {{min_coverage: 0, max_escalation: 100}}
  golive: {{checkpoint_write_gb_per_s: 1e-9, checkpoint_read_gb_per_s: 1e-9}}
retries: {{attempts: 0, delay_s: 0}}
"""
# The target refuses this run's writes (its key's policy denies them): the run fails after preflight.
DENIED_PLAN = """\
name: denied
source: {{storage: 'src://{bucket}/data'}}
target: {{storage: 'dst://{target_bucket}/denied'}}
profiles:
  src:
    type: s3
    endpoint_url: {moto}
    min_part_size: 262144
    credentials: {{access_key_id_env: {src_key}, secret_access_key_env: {src_secret}}}
  dst:
    type: s3
    endpoint_url: {moto}
    min_part_size: 262144
    credentials: {{access_key_id_env: {dst_key}, secret_access_key_env: {dst_secret}}}
phases:
  data_sync: {{threads: 2, part_size: 256K, multipart_threshold: 512K}}
retries: {{attempts: 0, delay_s: 0}}
"""
# To the registry whose logins the token server checks: two repositories at once (each with a token of its own
# scope) and a build that buildah pushes. Served (a run Prefect starts from the deployment), or waiting for approval.
BEARER_PLAN = """\
name: {name}
source:
  storage: 'src://{bucket}/data'
  registry: 127.0.0.1:{src_registry}/ml
target:
  profile: generic-k8s
  storage: 'dst://{target_bucket}/{name}'
  registry: 127.0.0.1:{bearer_registry}/{name}
profiles:
  src:
    type: s3
    endpoint_url: {moto}
    min_part_size: 262144
    credentials: {{access_key_id_{ch}: {src_key}, secret_access_key_{ch}: {src_secret}}}
  dst:
    type: s3
    endpoint_url: {moto}
    min_part_size: 262144
    credentials: {{access_key_id_{ch}: {dst_key}, secret_access_key_{ch}: {dst_secret}}}
phases:
  data_sync: {{threads: 2, part_size: 256K, multipart_threshold: 512K}}
  images:
    copy: ["tool:1", "eval:1"]
    dockerfiles: [{{path: app/Dockerfile, image: "app:1"}}]
    auth:
      "127.0.0.1:{bearer_registry}": {{username_{ch}: {registry_user}, password_{ch}: {registry_password}}}
retries: {{attempts: 0, delay_s: 0}}
{extra}
"""
# No RUN step: the base has no shell.
APP_DOCKERFILE = "FROM 127.0.0.1:{src_registry}/ml/tool:1\nENV APP=scan\n"
# `ferry sync` from moto to Azurite: a multipart object makes a presigned URL for Put Block From URL (Azurite
# answers 501, and ferry streams instead).
PROFILES = """\
profiles:
  src:
    type: s3
    endpoint_url: {moto}
    min_part_size: 262144
    credentials: {{access_key_id_{ch}: {src_key}, secret_access_key_{ch}: {src_secret}}}
  az:
    type: azure
    endpoint_url: {azurite}
    credentials: {{account_name: {account}, {azure_field}_{ch}: {azure}}}
"""
# A Secret's value in the manifests is the user's to apply, never to report; the one the cluster held before is
# kept for the rollback in the state directory's secret snapshot alone.
MANIFESTS = """\
apiVersion: v1
kind: ConfigMap
metadata: {{name: trainer-config, namespace: ml-train}}
data: {{EPOCHS: "10"}}
---
apiVersion: v1
kind: Secret
metadata: {{name: trainer-creds, namespace: ml-train}}
stringData: {{TOKEN: "{token}"}}
---
apiVersion: v1
kind: Pod
metadata: {{name: trainer, namespace: ml-train}}
spec:
  containers:
  - name: trainer
    image: 127.0.0.1:{src_registry}/ml/tool:1
    envFrom: [{{configMapRef: {{name: trainer-config}}}}, {{secretRef: {{name: trainer-creds}}}}]
"""


def _wrap_skopeo(root: Path, records: Path) -> Path:
    """A `skopeo` first on PATH that records its argv (one file per call, NUL-separated), then runs the real one."""
    real = shutil.which("skopeo")
    assert real, "skopeo is needed (.ci/run installs it)"
    folder = root / "bin"
    folder.mkdir()
    wrapper = folder / "skopeo"
    # It also notes the hosts the auth file holds logins for and the file's mode, never the logins themselves.
    wrapper.write_text(
        "#!/bin/sh\n"
        f'printf "%s\\0" "$0" "$@" > "{records}/skopeo-$$.argv"\n'
        'next=""\n'
        'for arg in "$@"; do\n'
        '  if [ -n "$next" ]; then\n'
        f'    stat -c %a "$arg" > "{records}/skopeo-$$.mode"\n'
        f'    grep -o \'"[^"]*": {{"auth"\' "$arg" | cut -d\'"\' -f2 > "{records}/skopeo-$$.hosts"\n'
        "  fi\n"
        '  next=""; [ "$arg" = --authfile ] && next=1\n'
        "done\n"
        f'exec {real} "$@"\n',
        encoding="utf-8",
    )
    wrapper.chmod(0o755)
    return folder


def _listing(*roots: Path) -> set[Path]:
    found: set[Path] = set()
    for root in roots:
        with contextlib.suppress(OSError):
            for folder, _, names in os.walk(root, onerror=lambda _: None):
                found.update(Path(folder, name) for name in names)
    return found


def _prefect_records(run_names: list[str], deployments: list[str], pool: str) -> Iterator[tuple[str, str]]:
    """(where, JSON) of everything the Prefect API holds about the flow runs named run_names and their subflow
    runs (each run with its parameters and every state, its task runs, logs, artifacts, events), and about the
    deployments and the work pool."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        FlowRunFilter,
        FlowRunFilterId,
        FlowRunFilterName,
        FlowRunFilterParentFlowRunId,
        LogFilter,
        LogFilterFlowRunId,
    )
    from prefect.events.filters import EventAnyResourceFilter, EventFilter

    with get_client(sync_client=True) as client:
        for deployment in deployments:
            yield f"prefect deployment {deployment}", client.read_deployment_by_name(deployment).model_dump_json()
        yield f"prefect work pool {pool}", client.read_work_pool(pool).model_dump_json()
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=run_names)))
        assert sorted(r.name for r in runs) == sorted(run_names), "every ferry run is a flow run on the server"
        frontier = [r.id for r in runs]
        while frontier:
            children = client.read_flow_runs(
                flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=frontier))
            )
            children = [c for c in children if c.id not in {r.id for r in runs}]
            runs += children
            frontier = [c.id for c in children]
        ids = [r.id for r in runs]
        for run in runs:
            yield f"prefect flow run {run.name}", run.model_dump_json()
            for state in client.read_flow_run_states(run.id):
                yield f"prefect flow run {run.name} state {state.type.value}", state.model_dump_json()
        task_runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=ids)))
        for task_run in task_runs:
            yield f"prefect task run {task_run.name}", task_run.model_dump_json()
        offset = 0
        while page := client.read_logs(
            log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=ids)), limit=200, offset=offset
        ):
            for log in page:
                yield f"prefect log of flow run {log.flow_run_id}", log.model_dump_json()
            offset += len(page)
        offset = 0
        while page := client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=ids)), limit=200, offset=offset
        ):
            for artifact in page:
                yield f"prefect artifact {artifact.key or artifact.type}", artifact.model_dump_json()
            offset += len(page)
        events = client.read_events(
            EventFilter(any_resource=EventAnyResourceFilter(id=[f"prefect.flow-run.{i}" for i in ids])), limit=50
        )
        while True:
            for event in events.events:
                yield f"prefect event {event.event}", event.model_dump_json()
            if not events.next_page:
                break
            events = client.read_events_page(events.next_page)


def _run_from_deployment(name: str, timeout: float = 60):
    """A flow run of the deployment name (created as the UI's Run button does), once `ferry serve` has registered
    it."""
    from prefect.client.orchestration import get_client

    deadline = time.monotonic() + timeout
    with get_client(sync_client=True) as client:
        while True:
            try:
                deployment = client.read_deployment_by_name(name)
            except Exception:  # noqa: BLE001 - not registered yet
                assert time.monotonic() < deadline, f"ferry serve registered no deployment {name}"
                time.sleep(0.5)
                continue
            return client.create_flow_run_from_deployment(deployment.id)


def _finished_run(flow_run_id, timeout: float = 180):
    """The flow run once its state is final (None after timeout)."""
    from prefect.client.orchestration import get_client

    deadline = time.monotonic() + timeout
    with get_client(sync_client=True) as client:
        while time.monotonic() < deadline:
            run = client.read_flow_run(flow_run_id)
            if run.state is not None and run.state.is_final():
                return run
            time.sleep(1)
    return None


def _canary_in_prefect(run_name: str, canary: str) -> None:
    """The canary in a log line and an artifact of the flow run run_name, written through the API."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import ArtifactCreate, LogCreate
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName

    now = datetime.datetime.now(datetime.UTC)
    with get_client(sync_client=True) as client:
        (run,) = client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[run_name])))
        client.create_logs(
            [LogCreate(name="canary", level=20, message=f"token={quote(canary)}", timestamp=now, flow_run_id=run.id)]
        )
        client.create_artifact(ArtifactCreate(type="markdown", data=f"`{canary}`", flow_run_id=run.id))


@pytest.mark.parametrize("user", ["robot", "robot1", "robot12"])  # the secret at each base64 alignment
def test_the_scanner_finds_a_secret_in_each_form_it_may_take(user: str) -> None:
    secret = f"s3/cr+t={secrets.token_urlsafe(18)}"
    scanner = Scanner()
    scanner.plant("it", secret)
    login = f"{user}:{secret}".encode()
    scanner.add("basic auth header", b"Authorization: Basic " + base64.b64encode(login))
    scanner.add("docker auth file", json.dumps({"auths": {"r.example": {"auth": base64.b64encode(login).decode()}}}))
    scanner.add("URL-safe base64", base64.urlsafe_b64encode(login))
    scanner.add("presigned URL", f"https://h.example/k?X-Amz-Signature={quote(secret, safe='')}&X-Amz-Expires=60")
    scanner.add("form body", urlencode({"password": secret, "user": user}))
    scanner.add("JSON log line", json.dumps({"event": "login", "secret": secret}))
    scanner.add("escaped JSON", json.dumps(secret).replace("/", "\\/"))
    scanner.add("a part too short to tell", f"sig={secret[:10]}...")
    found = {where for where, name in scanner.findings()}
    assert found == {
        "basic auth header",
        "docker auth file",
        "URL-safe base64",
        "presigned URL",
        "form body",
        "JSON log line",
        "escaped JSON",
    }


# Seventeen ferry commands against real servers: 90 s on a quiet machine, five times that on two busy cores (a CI
# run beside other work took 300 s, the suite's default limit, before its scan had ended).
@pytest.mark.timeout(900)
def test_planted_secrets_appear_in_no_output(
    prefect_api: str, azurite_server: Server, control_plane, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    from azure.storage.blob import BlobServiceClient
    from prefect.blocks.system import Secret

    scanner = Scanner()
    tag = uuid.uuid4().hex[:10]
    work = tmp_path / "work"
    work.mkdir()
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    argv_records = tmp_path / "argv"
    argv_records.mkdir()
    temp_roots = [Path(tempfile.gettempdir()), Path("/var/tmp")]
    temp_before = _listing(*temp_roots)

    # Servers that check what they are given: moto (S3 and IAM, signatures and policies once enforce_moto_auth
    # runs), Azurite (SAS and shared keys), a registry with logins, a cluster API that wants its token. The
    # source registry is anonymous.
    cleanup = contextlib.ExitStack()
    try:
        moto = start_moto(min_part_size=256 * 1024)
        cleanup.callback(moto.stop)
        source_registry, _ = start_registry_with_logins(tmp_path / "registry-src", {})
        cleanup.callback(source_registry.stop)
        logins = {
            f"robot-{ch}": scanner.plant(f"registry password ({ch})", secrets.token_urlsafe(24)) for ch in CHANNELS
        }
        target_registry, registry_checks = start_registry_with_logins(tmp_path / "registry-tgt", logins)
        cleanup.callback(target_registry.stop)
        # A registry that takes bearer tokens only; its token server checks these logins.
        bearer_logins = {
            f"bot-{ch}": scanner.plant(f"registry password, token flow ({ch})", secrets.token_urlsafe(24))
            for ch in CHANNELS
        }
        tokens = TokenServer(bearer_logins).start()
        cleanup.callback(tokens.stop)
        bearer_registry = start_registry_with_tokens(tmp_path / "registry-bearer", tokens)
        cleanup.callback(bearer_registry.stop)
        # The control plane's API server takes this bearer token (its static token file) besides certificates.
        scanner.plant("kubernetes bearer token", control_plane.token)
        keys: dict[str, tuple[str, str]] = {}
        for ch in CHANNELS:
            keys[f"src {ch}"] = moto_user(moto, f"reader-{ch}-{tag}", ["s3:*"])
            keys[f"dst {ch}"] = moto_user(moto, f"writer-{ch}-{tag}", ["s3:*"])
            keys[f"iam {ch}"] = moto_user(moto, f"auditor-{ch}-{tag}", ["iam:Get*", "iam:List*"])
            keys[f"sync {ch}"] = moto_user(moto, f"syncer-{ch}-{tag}", ["s3:*"])
            keys[f"ecr {ch}"] = moto_user(moto, f"puller-{ch}-{tag}", ["ecr:GetAuthorizationToken"])
        keys["dst denied"] = moto_user(moto, f"denied-{tag}", ["s3:*"], deny=["s3:PutObject"])
        for name, (key_id, secret_key) in keys.items():
            scanner.plant(f"AWS access key id ({name})", key_id)
            scanner.plant(f"AWS secret access key ({name})", secret_key)
        # moto's ECR token is the same for every caller of the account: looked for whole, in every encoding.
        ecr_token = moto.client("ecr").get_authorization_token()["authorizationData"][0]["authorizationToken"]
        ecr_password = base64.b64decode(ecr_token).decode().partition(":")[2]
        scanner.plant("ECR registry password", ecr_password, runs=False, shared=True)
        wrong_secret = scanner.plant("AWS secret access key (wrong)", secrets.token_urlsafe(30))
        sas = {ch: scanner.plant(f"azure SAS ({ch})", account_sas("racwdl")) for ch in CHANNELS}
        for ch, token in sas.items():
            # Its signature is the secret part: looked for alone too, decoded, as a log line might show it.
            scanner.plant(f"azure SAS signature ({ch})", unquote(re.search(r"sig=([^&]+)", token).group(1)))
        scanner.plant("azure account key", AZURITE_KEY, shared=True)

        bucket, target_bucket, container = f"scan-{tag}", f"scan-{tag}-target", f"scan-{tag}"
        s3 = moto.client("s3")
        s3.create_bucket(Bucket=bucket)
        s3.create_bucket(Bucket=target_bucket)
        for key, data in {"a/one.bin": b"1" * 1000, "a/two.bin": b"22", "b/big.bin": os.urandom(MiB)}.items():
            s3.put_object(Bucket=bucket, Key=f"data/{key}", Body=data)
        connection = azurite_server.env["AZURE_STORAGE_CONNECTION_STRING"]
        with BlobServiceClient.from_connection_string(connection) as service:
            service.create_container(container)
        push_image(f"127.0.0.1:{source_registry.port}", "ml/tool", "1", ["CUDA_VERSION=12.2.0"])
        push_image(f"127.0.0.1:{source_registry.port}", "ml/eval", "1", ["CUDA_VERSION=12.4.1"])
        enforce_moto_auth(moto)

        # The environment ferry runs in: no credential but the planted ones (boto3 and Azure would find others).
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("AWS_", "AZURE_")) and k not in ("FERRY_DEBUG", "PREFECT_API_URL")
        }
        env.update(
            {
                "AWS_CONFIG_FILE": os.devnull,
                "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
                "AWS_EC2_METADATA_DISABLED": "true",
                "PREFECT_API_URL": prefect_api,
                "COLUMNS": "200",
                "TMPDIR": str(private_tmp),
                "PATH": f"{_wrap_skopeo(tmp_path, argv_records)}{os.pathsep}{os.environ['PATH']}",
            }
        )

        def named(ch: str, values: dict[str, str]) -> dict[str, str]:
            """The name each value goes by in channel ch (a variable, set here; or a Secret block, saved now)."""
            names = {}
            for field_name, value in values.items():
                if ch == "env":
                    names[field_name] = f"FSCAN_{field_name.upper()}_{len(env)}"
                    env[names[field_name]] = value
                else:
                    names[field_name] = f"fscan-{tag}-{field_name.replace('_', '-')}-{secrets.token_hex(3)}"
                    Secret(value=value).save(names[field_name], overwrite=True)
            return names

        common = {
            "bucket": bucket,
            "target_bucket": target_bucket,
            "moto": moto.endpoint,
            "azurite": f"http://127.0.0.1:{azurite_server.port}/{AZURITE_ACCOUNT}",
            "account": AZURITE_ACCOUNT,
            "src_registry": source_registry.port,
            "tgt_registry": target_registry.port,
            "bearer_registry": bearer_registry.port,
            "ecr_host": "123456789012.dkr.ecr.us-east-1.amazonaws.com",
        }
        plans: dict[str, Path] = {}
        for ch in CHANNELS:
            folder = work / ch
            (folder / "k8s").mkdir(parents=True)
            token = scanner.plant(f"kubernetes Secret value in the manifests ({ch})", secrets.token_urlsafe(24))
            (folder / "k8s" / "app.yaml").write_text(MANIFESTS.format(token=token, **common))
            name = f"scan-{ch}"
            control_plane.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
            cleanup.callback(control_plane.delete_namespace, name)
            control_plane.wait(f"default ServiceAccount of {name}",
                               lambda n=name: control_plane.get("v1", "ServiceAccount", "default", n))  # fmt: skip
            before = scanner.plant(f"{SNAPSHOTTED} ({ch})", secrets.token_urlsafe(24))
            control_plane.seed(
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": "trainer-creds", "namespace": name},
                    "data": {"TOKEN": base64.b64encode(before.encode()).decode()},
                }
            )
            control_plane.kubeconfig(folder / "kubeconfig", context="meta-eu", token=True)
            values = {
                "iam_key": keys[f"iam {ch}"][0],
                "iam_secret": keys[f"iam {ch}"][1],
                "src_key": keys[f"src {ch}"][0],
                "src_secret": keys[f"src {ch}"][1],
                "dst_key": keys[f"dst {ch}"][0],
                "dst_secret": keys[f"dst {ch}"][1],
                "registry_user": f"robot-{ch}",
                "registry_password": logins[f"robot-{ch}"],
                "ecr_key": keys[f"ecr {ch}"][0],
                "ecr_secret": keys[f"ecr {ch}"][1],
            }
            plans[ch] = folder / "migration.yaml"
            plans[ch].write_text(PLAN.format(name=name, ch=ch, **common, **named(ch, values)))
            sync_values = {"src_key": keys[f"sync {ch}"][0], "src_secret": keys[f"sync {ch}"][1], "azure": sas[ch]}
            (work / f"profiles-{ch}.yaml").write_text(
                PROFILES.format(ch=ch, azure_field="sas_token", **common, **named(ch, sync_values))
            )
        (work / "denied").mkdir()
        plans["denied"] = work / "denied" / "migration.yaml"
        denied_values = {
            "src_key": keys["src env"][0],
            "src_secret": keys["src env"][1],
            "dst_key": keys["dst denied"][0],
            "dst_secret": keys["dst denied"][1],
        }
        plans["denied"].write_text(DENIED_PLAN.format(**common, **named("env", denied_values)))
        # Served, its logins as Secret blocks (resolved in the run the served deployment starts); waiting for its
        # approval, its logins as variables.
        served_name, approval_name = f"served-{tag}", f"approval-{tag}"
        for key, name, ch, extra in (
            ("served", served_name, "secret", 'schedule: "0 0 1 1 *"'),
            ("approval", approval_name, "env", "approve_before: [data_sync]"),
        ):
            (work / key / "app").mkdir(parents=True)
            (work / key / "app" / "Dockerfile").write_text(APP_DOCKERFILE.format(**common))
            values = {
                "src_key": keys[f"src {ch}"][0],
                "src_secret": keys[f"src {ch}"][1],
                "dst_key": keys[f"dst {ch}"][0],
                "dst_secret": keys[f"dst {ch}"][1],
                "registry_user": f"bot-{ch}",
                "registry_password": bearer_logins[f"bot-{ch}"],
            }
            plans[key] = work / key / "migration.yaml"
            plans[key].write_text(BEARER_PLAN.format(name=name, ch=ch, extra=extra, **common, **named(ch, values)))
        for name, secret_key in (("key", keys["sync env"][1]), ("wrong", wrong_secret)):
            key_values = {"src_key": keys["sync env"][0], "src_secret": secret_key, "azure": AZURITE_KEY}
            (work / f"profiles-{name}.yaml").write_text(
                PROFILES.format(ch="env", azure_field="account_key", **common, **named("env", key_values))
            )
        world = World(work, env, scanner)

        # -- ferry, as a user runs it ------------------------------------------------------------------------
        # The two plans share no state (their own state directories, target prefixes, repositories, namespaces).
        for shown in world.together(*(("plan", "show", str(plans[ch])) for ch in CHANNELS)):
            assert shown.code == 0, shown.out + shown.err
        runs = world.together(
            ("run", str(plans["env"])), ("run", str(plans["secret"]), "--log-format", "json"), watch=True
        )
        for ran in runs:
            assert ran.code == 0, ran.out + ran.err
        # Every phase that takes a credential ran (and none was skipped).
        phases = {"iam", "data_sync", "images", "manifests", "golive"}
        console = next(line for line in runs[0].out.splitlines() if line.startswith("run "))
        assert all(f"{phase} PASS" in console or f"{phase} WARN" in console for phase in phases), console
        summary = json.loads(runs[1].err.splitlines()[-1])
        assert summary["ok"] and phases <= set(summary["phases"]), summary
        for debug in ({}, {"FERRY_DEBUG": "1"}):  # one line, then the tracebacks a bug report would carry
            denied = world.ferry("run", str(plans["denied"]), env=debug)
            assert denied.code == 1 and "AccessDenied" in denied.err, denied.out + denied.err
        explained = world.ferry("iam", "explain", str(plans["env"]), f"aws:user/reader-env-{tag}")
        deployed = world.ferry("deploy", str(plans["env"]), "--pool", f"scan-{tag}")
        status = world.ferry("status", str(plans["env"]))
        rollback = world.ferry("rollback", str(plans["env"]), "--phase", "data_sync", "--dry-run")
        assert explained.code == 0 and "compute-operator" in explained.out, explained.out + explained.err
        assert deployed.code == 0, deployed.out + deployed.err
        assert status.code == 0 and "committed" in status.out, status.out + status.err
        assert rollback.code == 0 and "nothing was changed" in rollback.out, rollback.out + rollback.err
        # `ferry serve`, and a run Prefect starts from its deployment (as the UI's Run button does); meanwhile a run
        # that waits for `ferry approve`. Both go through the token server's registry.
        serving = world.start("serve", str(plans["served"]), watch=True, env={"PREFECT_RUNNER_POLL_FREQUENCY": "1"})
        waiting = world.start("run", str(plans["approval"]), "--approval-timeout", "240", watch=True)
        approved = None
        try:
            flow_run = _run_from_deployment(f"migrate/{served_name}")
            asked = waiting.wait_for(r"To approve: ferry approve ([\w.-]+)")
            assert asked, "".join(waiting.out + waiting.err)
            approved = world.ferry("approve", asked.group(1))
            assert approved.code == 0 and "resumes" in approved.out, approved.out + approved.err
            served_run = _finished_run(flow_run.id)
        finally:
            waited = world.finished(waiting, None if approved and approved.code == 0 else signal.SIGINT)
            served = world.finished(serving, signal.SIGINT)
        assert waited.code == 0, waited.out + waited.err
        assert "data_sync PASS" in waited.out and "images PASS" in waited.out, waited.out
        assert served_run is not None and served_run.state.is_completed(), (served_run, served.out, served.err)
        assert f"serving deployment migrate/{served_name}" in served.out, served.out + served.err
        assert "kind=rebuilt" in served.err, "the served run's log lines are in serve's output (scanned)"
        # Small objects only under a SAS: Azurite answers a Put Block From URL signed by a SAS with a 500 (not the
        # 501 ferry falls back on), so the multipart object, whose presigned URL Azurite is asked to pull, goes
        # with the account key. Each sync has its own state directory.
        source = f"src://{bucket}/data"
        sizes = ("--threads", "4", "--part-size", "256K", "--multipart-threshold", "512K")
        syncs = world.together(
            *(
                ("sync", source, f"az://{container}/sync-{ch}", "--profiles", f"profiles-{ch}.yaml", *sizes, *only,
                 "--state-dir", f"sync-{ch}", "--report", f"sync-{ch}.json", "--log-format", log_format)
                for ch, log_format, only in (
                    ("env", "console", ("--exclude", "b/*")),
                    ("secret", "json", ("--exclude", "b/*")),
                    ("key", "console", ()),
                )
            ),
            watch=True,
        )  # fmt: skip
        for synced in syncs:
            assert synced.code == 0, synced.out + synced.err
        wrong = world.ferry(
            "sync", source, f"az://{container}/wrong", "--profiles", "profiles-wrong.yaml", "--state-dir", "sync-wrong",
            "--log-format", "json",
        )  # fmt: skip
        assert wrong.code != 0 and "access denied" in wrong.err, wrong.out + wrong.err

        # The planted credentials were the ones used, and the servers checked them.
        # (The kubeconfigs held the bearer token as their only credential: each applied Secret is its use.)
        for ch in CHANNELS:
            applied = control_plane.get("v1", "Secret", "trainer-creds", f"scan-{ch}")
            value = applied.get("stringData", {}).get("TOKEN") or base64.b64decode(applied["data"]["TOKEN"]).decode()
            assert value == scanner.secrets[f"kubernetes Secret value in the manifests ({ch})"], "the Secret is applied"
        if registry_checks:
            with pytest.raises(urllib.error.HTTPError, match="401"):
                urllib.request.urlopen(f"http://127.0.0.1:{target_registry.port}/v2/")
        bearer_host = f"127.0.0.1:{bearer_registry.port}"
        with pytest.raises(urllib.error.HTTPError, match="401") as challenged:
            urllib.request.urlopen(f"http://{bearer_host}/v2/")
        assert challenged.value.headers["WWW-Authenticate"].startswith(f'Bearer realm="{tokens.realm}"')
        # The token flow ran for ferry's own client and for the tools (skopeo, buildah), with the logins given.
        agents = {agent.partition("/")[0] for _, agent in tokens.issued}
        assert tokens.refused == 0 and {"Python-urllib", "skopeo", "Buildah"} <= agents, (tokens.refused, agents)
        with pytest.raises(urllib.error.HTTPError, match="401"):
            wrong_login = base64.b64encode(f"bot-env:{wrong_secret}".encode()).decode()
            urllib.request.urlopen(
                urllib.request.Request(
                    f"{tokens.realm}?service={tokens.service}", headers={"Authorization": f"Basic {wrong_login}"}
                )
            )
        for number, (token, _) in enumerate(tokens.issued):
            # Its signature is what makes it a credential (the header is every token's); any encoding of the whole
            # token holds one of the signature's forms.
            scanner.plant(f"registry bearer token #{number}", token.rpartition(".")[2])
        calls = sorted(argv_records.glob("skopeo-*.argv"))
        to_bearer = [c for c in calls if f"docker://{bearer_host}/".encode() in c.read_bytes()]
        assert len(calls) - len(to_bearer) >= 2, "each run's images phase ran skopeo (recorded)"
        assert len(to_bearer) >= 4, "the served and the approved run copied two images each"
        for call in calls:
            # The logins reached skopeo in a private file: the registry's, and the ECR token moto handed out (or,
            # for the token server's registry, its login alone).
            hosts = set(call.with_suffix(".hosts").read_text().split())
            expected = {bearer_host} if call in to_bearer else {f"127.0.0.1:{target_registry.port}", common["ecr_host"]}
            assert hosts == expected, hosts
            assert call.with_suffix(".mode").read_text().strip() == "600"
        with BlobServiceClient.from_connection_string(connection) as service:
            landed = {b.name for b in service.get_container_client(container).list_blobs()}
        assert {"sync-env/a/one.bin", "sync-secret/a/one.bin", "sync-key/b/big.bin"} <= landed
        report = json.loads((work / "sync-key.json").read_text())
        assert "NotImplemented" in report["summary"]["url_copy"], "a presigned URL was made for Azurite to pull"
        listing = s3_as(moto, keys["dst env"]).list_objects_v2(Bucket=target_bucket)["Contents"]
        copied = {o["Key"] for o in listing}
        assert {f"scan-{ch}/b/big.bin" for ch in CHANNELS} <= copied and not any(
            k.startswith("denied/") for k in copied
        )

        # -- the canary: one written on purpose to each kind of place the scan reads ----------------------------
        canary = scanner.plant("canary", f"Canary-{secrets.token_hex(16)}")
        run_names = sorted(p.name for plan in plans.values() for p in (plan.parent / ".ferry" / "runs").iterdir())
        _canary_in_prefect(run_names[0], canary)
        (plans["env"].parent / ".ferry" / "state" / "canary.txt").write_text(
            json.dumps({"auth": base64.b64encode(f"robot:{canary}".encode()).decode()})
        )
        (private_tmp / "canary.tmp").write_bytes(quote_plus(canary).encode())
        (Path(tempfile.gettempdir()) / f"ferry-scan-canary-{tag}").write_text(canary)
        (argv_records / "canary.argv").write_text(canary)
        # A bearer token, as an auth file would hold it: its signature is what the scan looks for.
        canary_token = tokens.token("canary", ["repository:canary:pull"])
        scanner.plant("canary bearer token", canary_token.rpartition(".")[2])
        (plans["served"].parent / ".ferry" / "state" / "canary-auth.json").write_text(
            json.dumps({"auths": {bearer_host: {"registrytoken": canary_token}}})
        )
        with subprocess.Popen(
            [sys.executable, "-c", "import sys; sys.stdin.read()", f"--password={canary}"], stdin=subprocess.PIPE
        ) as holder:
            tree = ProcessTree(os.getpid())
            seen = tree.wait_for(canary)
            holder.stdin.close()
        canary_tree = tree.stop()
        assert seen, "the /proc sampler sees the command lines of descendants"

        # -- gather every output ---------------------------------------------------------------------------------
        for number, ran in enumerate(world.ran):
            label = f"#{number} `{' '.join(ran.argv)}`"
            scanner.add(f"{label} stdout", ran.out)
            scanner.add(f"{label} stderr", ran.err)
            for pid, line in ran.tree.items():
                scanner.add(f"{label} command line of pid {pid}", line)
        for pid, line in canary_tree.items():
            scanner.add(f"command line of pid {pid}", line)
        files = 0
        for folder in (plan.parent / ".ferry" for plan in plans.values()):
            files += scanner.add_tree(folder, str(folder.relative_to(tmp_path)))
        for ch in ("env", "secret", "key", "wrong"):
            files += scanner.add_tree(work / f"sync-{ch}", f"work/sync-{ch}")
            files += scanner.add_file(work / f"sync-{ch}.json", f"work/sync-{ch}.json (the sync's report)")
        files += scanner.add_tree(private_tmp, "TMPDIR")
        files += scanner.add_tree(argv_records, "skopeo argv")
        servers = [tmp_path, azurite_server.workdir]
        new_temp = sorted(
            p
            for p in _listing(*temp_roots) - temp_before
            if not any(p.is_relative_to(s) for s in servers if s is not None)
        )
        for path in new_temp:
            files += scanner.add_file(path, f"new temporary file {path}", limit=64 * MiB, shared=True)
        prefect_db = sorted(tmp_path_factory.getbasetemp().glob("prefect-home*/prefect.db*"))
        assert prefect_db, "the session's Prefect server keeps its database under its own PREFECT_HOME"
        for path in prefect_db:
            files += scanner.add_file(path, f"Prefect database {path.name}", shared=True)
        records = 0
        deployments = ["migrate/scan-env", f"migrate/{served_name}"]
        for where, text in _prefect_records(run_names, deployments, f"scan-{tag}"):
            scanner.add(where, text)
            records += 1

        found = scanner.findings()
        # The one place a secret belongs: the Secret the cluster held, in the snapshot its rollback restores.
        snapshots = {
            f"{ch}/.ferry/manifests/secret-snapshots/{p.name}": p
            for ch in CHANNELS
            for p in (work / ch / ".ferry" / "manifests" / "secret-snapshots").glob("*.json")
        }
        kept = {(where, name) for where, name in found if name.startswith(SNAPSHOTTED)}
        assert len(snapshots) == len(CHANNELS) and all(
            stat.S_IMODE(p.stat().st_mode) == 0o600 for p in snapshots.values()
        )
        assert {name for _, name in kept} == {f"{SNAPSHOTTED} ({ch})" for ch in CHANNELS}, "each snapshot is scanned"
        leaks = [
            f"{where}: {name}, {', '.join(shapes)}"
            for (where, name), shapes in found.items()
            if not name.startswith("canary")
            and not ((where, name) in kept and any(where.endswith(s) for s in snapshots))
        ]
        caught = {where for where, name in found if name == "canary"}
        print(
            f"scanned {len(scanner.sources)} outputs ({files} files, {records} Prefect records, "
            f"{scanner.size / MiB:.1f} MiB) for {len(scanner.secrets)} secrets in {len(scanner.needles)} forms"
        )
        assert not leaks, "planted secrets found:\n" + "\n".join(leaks)
        expected = {
            "a Prefect log": any(w.startswith("prefect log") for w in caught),
            "a Prefect artifact": any(w.startswith("prefect artifact") for w in caught),
            "the state directory": any(w.endswith(".ferry/state/canary.txt") for w in caught),
            "TMPDIR": "TMPDIR/canary.tmp" in caught,
            "a new temporary file": any(w.startswith("new temporary file") for w in caught),
            "a command line": any(w.startswith("command line of pid") for w in caught),
            "the argv records": "skopeo argv/canary.argv" in caught,
            "the Prefect database": any(w.startswith("Prefect database") for w in caught),
            "a bearer token": ("work/served/.ferry/state/canary-auth.json", "canary bearer token") in found,
        }
        assert all(expected.values()), f"the scan missed the canary in: {[k for k, v in expected.items() if not v]}"
    finally:
        cleanup.close()
        with contextlib.suppress(OSError):
            (Path(tempfile.gettempdir()) / f"ferry-scan-canary-{tag}").unlink()
