"""An in-process Kubernetes API emulator over HTTP, for tests: no real API server can run on these machines.

It serves, on a free loopback port, what the official `kubernetes` client needs to create, read, list (with
label selectors), replace (PUT), patch (server-side apply that creates, strategic merge, JSON merge, JSON patch)
and delete objects of the core, apps, batch, rbac, autoscaling, networking, policy and storage groups, and of any
custom resource registered with `add_resource()` or a CustomResourceDefinition; with discovery, so the dynamic
client works. resourceVersion increments on every write, generation on every spec change; a stale
resourceVersion on PUT is a 409, as is creating what exists; a Job's pod template is immutable (422).

What an emulator cannot show: nothing runs. There are no controllers (no pods behind a Deployment, no
readiness, no garbage collection by owner), no admission or schema validation, no authentication or RBAC, no
watches; a DELETE answers a Status (a real server often answers the object; the dynamic client takes either);
a namespace is deleted at once with its objects (a real one goes through Terminating); server-side
apply removes the fields its manager applied before and no longer applies, but treats lists as atomic and
reports no conflicts with other managers. Tests simulate what controllers do by setting `.status`:
`set_status()` for one object, `on_write(kind, fn)` for a status computed after every write of a kind; and
what an admission webhook would refuse with `deny(kind, message)`.
"""

from __future__ import annotations

import copy
import datetime
import itertools
import json
import re
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml


@dataclass(frozen=True)
class ApiResource:
    """One resource type the emulator serves: group ("" for core), versions, plural, kind, scope."""

    group: str
    versions: tuple[str, ...]
    plural: str
    kind: str
    namespaced: bool = True


_CORE = [
    ("namespaces", "Namespace", False),
    ("pods", "Pod", True),
    ("services", "Service", True),
    ("configmaps", "ConfigMap", True),
    ("secrets", "Secret", True),
    ("serviceaccounts", "ServiceAccount", True),
    ("persistentvolumeclaims", "PersistentVolumeClaim", True),
    ("persistentvolumes", "PersistentVolume", False),
    ("endpoints", "Endpoints", True),
    ("limitranges", "LimitRange", True),
    ("resourcequotas", "ResourceQuota", True),
    ("podtemplates", "PodTemplate", True),
    ("replicationcontrollers", "ReplicationController", True),
    ("nodes", "Node", False),
]
_GROUPS = [
    ("apps", ("v1",), "deployments", "Deployment", True),
    ("apps", ("v1",), "statefulsets", "StatefulSet", True),
    ("apps", ("v1",), "daemonsets", "DaemonSet", True),
    ("apps", ("v1",), "replicasets", "ReplicaSet", True),
    ("batch", ("v1",), "jobs", "Job", True),
    ("batch", ("v1",), "cronjobs", "CronJob", True),
    ("rbac.authorization.k8s.io", ("v1",), "roles", "Role", True),
    ("rbac.authorization.k8s.io", ("v1",), "rolebindings", "RoleBinding", True),
    ("rbac.authorization.k8s.io", ("v1",), "clusterroles", "ClusterRole", False),
    ("rbac.authorization.k8s.io", ("v1",), "clusterrolebindings", "ClusterRoleBinding", False),
    ("autoscaling", ("v2", "v1"), "horizontalpodautoscalers", "HorizontalPodAutoscaler", True),
    ("networking.k8s.io", ("v1",), "ingresses", "Ingress", True),
    ("networking.k8s.io", ("v1",), "networkpolicies", "NetworkPolicy", True),
    ("policy", ("v1",), "poddisruptionbudgets", "PodDisruptionBudget", True),
    ("storage.k8s.io", ("v1",), "storageclasses", "StorageClass", False),
    ("scheduling.k8s.io", ("v1",), "priorityclasses", "PriorityClass", False),
    ("apiextensions.k8s.io", ("v1",), "customresourcedefinitions", "CustomResourceDefinition", False),
]
_MANAGED_BY_SERVER = ("resourceVersion", "uid", "creationTimestamp", "generation", "managedFields")


class ApiError(Exception):
    """An API error answered as a Kubernetes Status object."""

    def __init__(self, code: int, reason: str, message: str):
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _merge(target: dict, patch: dict, strategic: bool) -> dict:
    """RFC 7386 merge of patch into target (None deletes); strategic: lists of named maps merge by name."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value, strategic)
        elif strategic and _named_list(value) and _named_list(target.get(key)):
            by_name = {item["name"]: item for item in target[key]}
            for item in value:
                if item["name"] in by_name:
                    _merge(by_name[item["name"]], item, strategic)
                else:
                    target[key].append(copy.deepcopy(item))
        else:
            target[key] = copy.deepcopy(value)
    return target


def _named_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(i, dict) and "name" in i for i in value)


def _prune(target: dict, before: dict, now: dict) -> None:
    """Remove from target what a manager applied before (`before`) and no longer applies (`now`)."""
    for key, value in before.items():
        if key not in now:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(now[key], dict) and isinstance(target.get(key), dict):
            _prune(target[key], value, now[key])


def _json_patch(target: dict, operations: list[dict]) -> dict:
    """RFC 6902 add, remove and replace."""
    for op in operations:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        parent: Any = target
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent[part]
        last = parts[-1]
        if isinstance(parent, list):
            index = len(parent) if last == "-" else int(last)
            if op["op"] == "add":
                parent.insert(index, op["value"])
            elif op["op"] == "remove":
                del parent[index]
            else:
                parent[index] = op["value"]
        elif op["op"] == "remove":
            del parent[last]
        else:
            parent[last] = op["value"]
    return target


_SELECTOR = re.compile(r"^\s*(!?)([\w./-]+)\s*(?:(==|=|!=)\s*([\w.-]*)|\s+(in|notin)\s*\(([^)]*)\))?\s*$")


def _selector_terms(selector: str) -> list[str]:
    """Split a label selector at the commas outside parentheses."""
    terms, depth, current = [], 0, ""
    for char in selector:
        depth += char == "("
        depth -= char == ")"
        if char == "," and depth == 0:
            terms.append(current)
            current = ""
        else:
            current += char
    return [t for t in [*terms, current] if t.strip()]


def matches_labels(labels: dict[str, str], selector: str) -> bool:
    """Whether labels satisfy a label selector (=, ==, !=, in, notin, exists, !exists)."""
    for term in _selector_terms(selector):
        match = _SELECTOR.match(term)
        if match is None:
            raise ApiError(400, "BadRequest", f"unable to parse requirement: {term!r}")
        negate, key, op, value, set_op, values = match.groups()
        if op in ("=", "=="):
            ok = labels.get(key) == value
        elif op == "!=":
            ok = labels.get(key) != value
        elif set_op:
            members = {v.strip() for v in values.split(",")}
            ok = labels.get(key) in members if set_op == "in" else labels.get(key) not in members
        else:
            ok = (key in labels) != bool(negate)
        if not ok:
            return False
    return True


class KubeEmulator:
    """The API on http://127.0.0.1:<port>; start() and stop(), or use it as a context manager."""

    def __init__(self, version: str = "1.30"):
        self.version = version
        self.resources: dict[tuple[str, str], ApiResource] = {}
        for plural, kind, namespaced in _CORE:
            self.add_resource("", ("v1",), plural, kind, namespaced)
        for group, versions, plural, kind, namespaced in _GROUPS:
            self.add_resource(group, versions, plural, kind, namespaced)
        # (group, plural, namespace or "", name) -> the stored object (apiVersion as last written)
        self._objects: dict[tuple[str, str, str, str], dict] = {}
        # (group, plural, namespace, name, manager) -> what that manager last applied (for pruning)
        self._applied: dict[tuple[str, str, str, str, str], dict] = {}
        self._reactors: dict[str, Callable[[dict], dict | None]] = {}
        self._denied: dict[str, str] = {}
        self._rv = itertools.count(1)
        self._lock = threading.RLock()
        self.requests: list[tuple[str, str]] = []
        self._server: ThreadingHTTPServer | None = None
        for name in ("default", "kube-system"):
            self.seed({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    # -- life -------------------------------------------------------------------------------------
    def start(self) -> KubeEmulator:
        handler = type("Handler", (_Handler,), {"emulator": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="kube-emulator", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> KubeEmulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server is not None, "start() the emulator first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def write_kubeconfig(self, path: Path, context: str = "emulator", namespace: str = "default") -> Path:
        """A kubeconfig whose context `context` talks to this emulator (no credentials: it checks none)."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "emulator", "cluster": {"server": self.url}}],
            "users": [{"name": "emulator", "user": {}}],
            "contexts": [
                {"name": context, "context": {"cluster": "emulator", "user": "emulator", "namespace": namespace}}
            ],
            "current-context": context,
        }
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
        return path

    def api_client(self) -> Any:
        """An official-client ApiClient talking to this emulator."""
        from kubernetes import client

        configuration = client.Configuration()
        configuration.host = self.url
        return client.ApiClient(configuration)

    # -- what tests set and read ------------------------------------------------------------------
    def add_resource(
        self, group: str, versions: tuple[str, ...], plural: str, kind: str, namespaced: bool = True
    ) -> None:
        """Serve a resource type (a custom resource, as its CRD would)."""
        self.resources[(group, plural)] = ApiResource(group, versions, plural, kind, namespaced)

    def on_write(self, kind: str, status: Callable[[dict], dict | None]) -> None:
        """After every write of an object of kind (not of its status), set its status to status(object)."""
        self._reactors[kind] = status

    def deny(self, kind: str, message: str) -> None:
        """Refuse every write of kind (403), as an admission webhook (a policy engine) would."""
        self._denied[kind] = message

    def _admit(self, kind: str) -> None:
        if kind in self._denied:
            raise ApiError(
                403, "Forbidden", f'admission webhook "policy.emulator" denied the request: {self._denied[kind]}'
            )

    def resource_of(self, api_version: str, kind: str) -> ApiResource:
        group = api_version.rpartition("/")[0]
        for resource in self.resources.values():
            if resource.group == group and resource.kind == kind:
                return resource
        raise KeyError(f"{api_version} {kind} is not served")

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict | None:
        """A copy of the stored object, or None."""
        resource = self.resource_of(api_version, kind)
        with self._lock:
            found = self._objects.get((resource.group, resource.plural, namespace or "", name))
            return copy.deepcopy(found)

    def objects(self, kind: str | None = None) -> list[dict]:
        """Copies of every stored object (of kind), in key order."""
        with self._lock:
            return [copy.deepcopy(o) for _, o in sorted(self._objects.items()) if kind in (None, o["kind"])]

    def set_status(self, api_version: str, kind: str, name: str, namespace: str | None, status: dict) -> None:
        """Replace an object's status, as its controller would (a write: resourceVersion moves)."""
        resource = self.resource_of(api_version, kind)
        with self._lock:
            obj = self._objects[(resource.group, resource.plural, namespace or "", name)]
            obj["status"] = copy.deepcopy(status)
            obj["metadata"]["resourceVersion"] = str(next(self._rv))

    def seed(self, obj: dict) -> dict:
        """Store an object as if someone created it before the test (no reactor runs)."""
        resource = self.resource_of(obj["apiVersion"], obj["kind"])
        namespace = obj["metadata"].get("namespace", "default") if resource.namespaced else ""
        with self._lock:
            return copy.deepcopy(self._create(resource, namespace, copy.deepcopy(obj), react=False))

    # -- the API ----------------------------------------------------------------------------------
    def _key(self, resource: ApiResource, namespace: str, name: str) -> tuple[str, str, str, str]:
        return (resource.group, resource.plural, namespace, name)

    def _stamp(self, obj: dict, previous: dict | None) -> dict:
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = str(next(self._rv))
        if previous is None:
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = _now()
            meta["generation"] = 1
        else:
            for key in ("uid", "creationTimestamp"):
                meta[key] = previous["metadata"][key]
            unchanged = {k: v for k, v in obj.items() if k not in ("metadata", "status")} == {
                k: v for k, v in previous.items() if k not in ("metadata", "status")
            }
            meta["generation"] = previous["metadata"]["generation"] + (0 if unchanged else 1)
        return obj

    def _react(self, obj: dict) -> None:
        reactor = self._reactors.get(obj["kind"])
        if reactor is not None:
            status = reactor(copy.deepcopy(obj))
            if status is not None:
                obj["status"] = status

    def _manage(self, obj: dict, manager: str | None, operation: str, api_version: str) -> None:
        if not manager:
            return
        entries = [e for e in obj["metadata"].get("managedFields", []) if e["manager"] != manager]
        entries.append(
            {
                "manager": manager,
                "operation": operation,
                "apiVersion": api_version,
                "time": _now(),
                "fieldsType": "FieldsV1",
                "fieldsV1": {},
            }
        )
        obj["metadata"]["managedFields"] = entries

    def _check_namespace(self, resource: ApiResource, namespace: str) -> None:
        if resource.namespaced and ("", "namespaces", "", namespace) not in self._objects:
            raise ApiError(404, "NotFound", f'namespaces "{namespace}" not found')

    def _create(self, resource: ApiResource, namespace: str, body: dict, react: bool = True) -> dict:
        name = body.get("metadata", {}).get("name")
        if not name:
            raise ApiError(422, "Invalid", f"{resource.kind}: metadata.name: Required value")
        self._check_namespace(resource, namespace)
        if react:
            self._admit(resource.kind)
        key = self._key(resource, namespace, name)
        if key in self._objects:
            raise ApiError(409, "AlreadyExists", f'{resource.plural} "{name}" already exists')
        if resource.namespaced:
            body["metadata"]["namespace"] = namespace
        else:
            body["metadata"].pop("namespace", None)
        for field in _MANAGED_BY_SERVER:
            body["metadata"].pop(field, None)
        body.setdefault("kind", resource.kind)
        self._stamp(body, None)
        if react:
            self._react(body)
        self._objects[key] = body
        if resource.kind == "CustomResourceDefinition":
            spec = body["spec"]
            self.add_resource(
                spec["group"],
                tuple(v["name"] for v in spec["versions"]),
                spec["names"]["plural"],
                spec["names"]["kind"],
                spec.get("scope", "Namespaced") == "Namespaced",
            )
        return body

    def _update(self, resource: ApiResource, key: tuple, new: dict, status_only: bool) -> dict:
        previous = self._objects[key]
        if not status_only:
            self._admit(resource.kind)
        if status_only:
            merged = copy.deepcopy(previous)
            merged["status"] = new.get("status", {})
            new = merged
        else:
            new["status"] = copy.deepcopy(previous.get("status", new.get("status")))
            if new["status"] is None:
                new.pop("status")
            if resource.kind == "Job" and new.get("spec", {}).get("template") != previous["spec"].get("template"):
                raise ApiError(422, "Invalid", f'Job.batch "{key[3]}" is invalid: spec.template: field is immutable')
        meta = new.setdefault("metadata", {})
        meta["name"], meta["managedFields"] = key[3], previous["metadata"].get("managedFields", [])
        if resource.namespaced:
            meta["namespace"] = key[2]
        self._stamp(new, previous)
        if not status_only:
            self._react(new)
        self._objects[key] = new
        return new

    def handle(self, method: str, url: str, content_type: str, raw: bytes) -> tuple[int, dict]:
        """Answer one request: (status code, JSON body)."""
        split = urlsplit(url)
        query = {k: v[0] for k, v in parse_qs(split.query).items()}
        parts = [p for p in split.path.split("/") if p]
        with self._lock:
            self.requests.append((method, split.path))
            if parts == ["version"]:
                minor = self.version.split(".")[1]
                return 200, {
                    "major": "1",
                    "minor": minor,
                    "gitVersion": f"v{self.version}.0",
                    "platform": "linux/amd64",
                }
            if parts == ["api"]:
                return 200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
            if parts == ["apis"]:
                return 200, self._groups()
            if parts[:1] == ["api"]:
                group, version, rest = "", parts[1], parts[2:]
            elif parts[:1] == ["apis"] and len(parts) >= 3:
                group, version, rest = parts[1], parts[2], parts[3:]
            else:
                raise ApiError(404, "NotFound", f"the server could not find the requested resource {split.path}")
            if not rest:
                return 200, self._resource_list(group, version)
            namespace = ""
            if rest[0] == "namespaces" and len(rest) >= 3:
                namespace, rest = rest[1], rest[2:]
            plural, name, sub = rest[0], rest[1] if len(rest) > 1 else None, rest[2] if len(rest) > 2 else None
            resource = self.resources.get((group, plural))
            if resource is None or version not in resource.versions:
                raise ApiError(404, "NotFound", f"the server could not find the requested resource {split.path}")
            if sub not in (None, "status"):
                raise ApiError(404, "NotFound", f"subresource {sub} is not served by the emulator")
            api_version = f"{group}/{version}" if group else version
            body = self._body(raw, content_type) if raw else None
            if name is None:
                return self._collection(method, resource, api_version, namespace, query, body)
            return self._one(method, resource, api_version, namespace, name, sub, query, content_type, body)

    def _body(self, raw: bytes, content_type: str) -> Any:
        try:
            return yaml.safe_load(raw) if "yaml" in content_type else json.loads(raw)
        except (ValueError, yaml.YAMLError) as exc:
            raise ApiError(400, "BadRequest", f"the body is not {content_type}: {exc}") from None

    def _out(self, obj: dict, api_version: str) -> dict:
        out = copy.deepcopy(obj)
        out["apiVersion"] = api_version
        return out

    def _collection(
        self, method: str, resource: ApiResource, api_version: str, namespace: str, query: dict, body: Any
    ) -> tuple[int, dict]:
        if method == "POST":
            if not isinstance(body, dict):
                raise ApiError(400, "BadRequest", "the body must be an object")
            if query.get("dryRun") == "All":
                return 201, self._out(body, api_version)
            if resource.namespaced and body.get("metadata", {}).get("namespace", namespace) != namespace:
                raise ApiError(
                    400, "BadRequest", "the namespace of the object does not match the namespace of the request"
                )
            created = self._create(resource, namespace, body)
            self._manage(created, query.get("fieldManager"), "Update", api_version)
            return 201, self._out(created, api_version)
        if method != "GET":
            raise ApiError(405, "MethodNotAllowed", f"{method} on a collection is not served by the emulator")
        selector = query.get("labelSelector", "")
        fields = dict(t.split("=", 1) for t in query.get("fieldSelector", "").split(",") if "=" in t)
        items = [
            self._out(obj, api_version)
            for (group, plural, ns, _), obj in sorted(self._objects.items())
            if (group, plural) == (resource.group, resource.plural)
            and (not namespace or ns == namespace)
            and matches_labels(obj["metadata"].get("labels") or {}, selector)
            and all(obj["metadata"].get(k.removeprefix("metadata.")) == v for k, v in fields.items())
        ]
        return 200, {
            "kind": f"{resource.kind}List",
            "apiVersion": api_version,
            "metadata": {"resourceVersion": str(next(self._rv))},
            "items": items,
        }

    def _one(
        self,
        method: str,
        resource: ApiResource,
        api_version: str,
        namespace: str,
        name: str,
        sub: str | None,
        query: dict,
        content_type: str,
        body: Any,
    ) -> tuple[int, dict]:
        key = self._key(resource, namespace, name)
        current = self._objects.get(key)
        manager = query.get("fieldManager")
        if method == "GET":
            if current is None:
                raise ApiError(404, "NotFound", f'{resource.plural} "{name}" not found')
            return 200, self._out(current, api_version)
        if method == "DELETE":
            if current is None:
                raise ApiError(404, "NotFound", f'{resource.plural} "{name}" not found')
            del self._objects[key]
            if resource.kind == "Namespace":
                for other in [k for k in self._objects if k[2] == name]:
                    del self._objects[other]
            return 200, {
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Success",
                "details": {"name": name, "kind": resource.plural, "uid": current["metadata"]["uid"]},
            }
        if method == "PUT":
            if current is None:
                raise ApiError(404, "NotFound", f'{resource.plural} "{name}" not found')
            if not isinstance(body, dict):
                raise ApiError(400, "BadRequest", "the body must be an object")
            sent = body.get("metadata", {}).get("resourceVersion")
            if sent and sent != current["metadata"]["resourceVersion"]:
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {resource.plural} "{name}": the object has '
                    "been modified; please apply your changes to the latest version and try again",
                )
            updated = self._update(resource, key, body, status_only=sub == "status")
            self._manage(updated, manager, "Update", api_version)
            return 200, self._out(updated, api_version)
        if method != "PATCH":
            raise ApiError(405, "MethodNotAllowed", f"{method} is not served by the emulator")
        if content_type.startswith("application/apply-patch"):
            return self._apply(resource, api_version, namespace, name, key, current, body, query)
        if current is None:
            raise ApiError(404, "NotFound", f'{resource.plural} "{name}" not found')
        patched = copy.deepcopy(current)
        if content_type.startswith("application/json-patch+json"):
            patched = _json_patch(patched, body)
        elif content_type.startswith("application/strategic-merge-patch+json"):
            if resource.group not in {g for g, *_ in _GROUPS} | {""}:
                raise ApiError(
                    415,
                    "UnsupportedMediaType",
                    "the body of the request was in an unknown format "
                    "- accepted media types include: application/json-patch+json, "
                    "application/merge-patch+json, application/apply-patch+yaml",
                )
            _merge(patched, body, strategic=True)
        elif content_type.startswith("application/merge-patch+json"):
            _merge(patched, body, strategic=False)
        else:
            raise ApiError(415, "UnsupportedMediaType", f"{content_type} is not a patch type")
        if query.get("dryRun") == "All":
            return 200, self._out(patched, api_version)
        updated = self._update(resource, key, patched, status_only=sub == "status")
        self._manage(updated, manager, "Update", api_version)
        return 200, self._out(updated, api_version)

    def _apply(
        self,
        resource: ApiResource,
        api_version: str,
        namespace: str,
        name: str,
        key: tuple,
        current: dict | None,
        body: Any,
        query: dict,
    ) -> tuple[int, dict]:
        manager = query.get("fieldManager")
        if not manager:
            raise ApiError(400, "BadRequest", "PATCH with application/apply-patch+yaml requires fieldManager")
        if not isinstance(body, dict) or body.get("metadata", {}).get("name") != name:
            raise ApiError(400, "BadRequest", "the applied object must name the object of the request")
        if query.get("dryRun") == "All":
            return 200, self._out(_merge(copy.deepcopy(current or {}), body, strategic=True), api_version)
        if current is None:
            created = self._create(resource, namespace, copy.deepcopy(body))
            self._manage(created, manager, "Apply", api_version)
            self._applied[(*key, manager)] = copy.deepcopy(body)
            return 201, self._out(created, api_version)
        applied = copy.deepcopy(current)
        _prune(applied, self._applied.get((*key, manager), {}), body)
        _merge(applied, body, strategic=True)
        updated = self._update(resource, key, applied, status_only=False)
        self._manage(updated, manager, "Apply", api_version)
        self._applied[(*key, manager)] = copy.deepcopy(body)
        return 200, self._out(updated, api_version)

    def _groups(self) -> dict:
        groups: dict[str, list[str]] = {}
        for resource in self.resources.values():
            if resource.group:
                known = groups.setdefault(resource.group, [])
                known += [v for v in resource.versions if v not in known]
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [
                {
                    "name": group,
                    "versions": [{"groupVersion": f"{group}/{v}", "version": v} for v in versions],
                    "preferredVersion": {"groupVersion": f"{group}/{versions[0]}", "version": versions[0]},
                }
                for group, versions in sorted(groups.items())
            ],
        }

    def _resource_list(self, group: str, version: str) -> dict:
        served = [r for r in self.resources.values() if r.group == group and version in r.versions]
        if not served:
            raise ApiError(404, "NotFound", f"{group}/{version} is not served")
        verbs = ["create", "delete", "get", "list", "patch", "update"]
        resources = []
        for r in served:
            resources.append(
                {
                    "name": r.plural,
                    "singularName": r.kind.lower(),
                    "namespaced": r.namespaced,
                    "kind": r.kind,
                    "verbs": verbs,
                }
            )
            resources.append(
                {
                    "name": f"{r.plural}/status",
                    "singularName": "",
                    "namespaced": r.namespaced,
                    "kind": r.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": resources,
        }


class _Handler(BaseHTTPRequestHandler):
    emulator: KubeEmulator
    protocol_version = "HTTP/1.1"

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            code, body = self.emulator.handle(self.command, self.path, self.headers.get("Content-Type", ""), raw)
        except ApiError as exc:
            code = exc.code
            body = {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": exc.message,
                "reason": exc.reason,
                "code": exc.code,
            }
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests read `emulator.requests` instead of a log."""
