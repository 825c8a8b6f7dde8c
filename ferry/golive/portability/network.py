"""Network settings a workload runs with, against the target's fabric: the environment of each container (its env,
the ConfigMaps it mounts as environment, a Dockerfile stage's ENV, a script's exports, os.environ in Python), the
RDMA resources it requests, hostNetwork and added capabilities."""

from __future__ import annotations

import re
import shlex
from typing import Any

import dockerfile
from ruamel.yaml.error import YAMLError

from ferry.golive.portability import packages
from ferry.golive.portability.model import Container, Hit, Setting, quote, unreadable
from ferry.golive.portability.rules import Rule, matches
from ferry.manifests.roundtrip import parse
from ferry.plan import TargetProfile

_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)


def yaml_line(node: Any, key: Any) -> int:
    """The 1-based line of a key of a mapping (an index of a sequence) read by ruamel.yaml; 0 when unknown."""
    lc = getattr(node, "lc", None)
    try:
        position = lc.key(key) if isinstance(node, dict) else lc.item(key)
    except (AttributeError, KeyError, IndexError, TypeError):
        return 0
    return position[0] + 1


def manifest_documents(text: str, file: str) -> list[dict] | Hit:
    """The objects of a multi-document YAML file (a List's items among them), or why it cannot be read (a Helm
    template before rendering)."""
    try:
        docs = parse(text, (2, 2, 0))
    except (YAMLError, ValueError, RecursionError) as exc:
        mark = getattr(exc, "problem_mark", None)
        template = " (a template: render it first, e.g. helm template, and audit the output)" if "{{" in text else ""
        why = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        return unreadable(file, mark.line + 1 if mark is not None else 1, f"not YAML: {why}{template}")
    if "{{" in text and _mapping_key(docs):
        # `name: {{ .Release.Name }}` reads as a mapping of a mapping: a template's text, not its output.
        return unreadable(file, 1, "a template, not its output: render it first (helm template) and audit that")
    objects: list[dict] = []
    for doc in docs:
        if isinstance(doc, dict) and str(doc.get("kind", "")).endswith("List") and isinstance(doc.get("items"), list):
            objects += [item for item in doc["items"] if isinstance(item, dict)]
        elif isinstance(doc, dict):
            objects.append(doc)
    return objects


def _mapping_key(node: Any) -> bool:
    """Whether a mapping somewhere in node has a mapping as a key."""
    if isinstance(node, dict):
        return any(hasattr(k, "items") or _mapping_key(v) for k, v in node.items())
    return isinstance(node, list) and any(_mapping_key(item) for item in node)


def _name(obj: dict) -> tuple[str | None, str]:
    metadata = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    return metadata.get("namespace"), str(metadata.get("name", "?"))


def config_maps(objects: list[tuple[str, dict]]) -> dict[tuple[str | None, str], list[Setting]]:
    """Every ConfigMap's data as settings, by (namespace, name), and those a kustomization generates from literals;
    objects: (file, object)."""
    found = {}
    for file, obj in objects:
        data = obj.get("data")
        if obj.get("kind") == "ConfigMap" and isinstance(data, dict):
            namespace, name = _name(obj)
            found[namespace, name] = [
                Setting(str(k), str(v), file, yaml_line(data, k), via=f"ConfigMap {name}") for k, v in data.items()
            ]
        generators = obj.get("configMapGenerator") if obj.get("kind") == "Kustomization" else None
        for generator in generators if isinstance(generators, list) else []:
            literals = generator.get("literals") if isinstance(generator, dict) else None
            if isinstance(literals, list) and "name" in generator:
                name = str(generator["name"])
                found[generator.get("namespace", obj.get("namespace")), name] = [
                    Setting(k, str(v), file, line, via=f"ConfigMap {name}") for k, v, line in _pairs(literals)
                ]
    return found


def _pod_specs(node: Any) -> list[dict]:
    """Every pod spec in an object, wherever its kind keeps it (a Job's, a PyTorchJob's replicas', an MPIJob's):
    a mapping with a list of containers."""
    if isinstance(node, list):
        return [spec for item in node for spec in _pod_specs(item)]
    if not isinstance(node, dict):
        return []
    if isinstance(node.get("containers"), list):
        return [node]
    return [spec for value in node.values() for spec in _pod_specs(value)]


def workload_containers(
    objects: list[tuple[str, dict]], maps: dict[tuple[str | None, str], list[Setting]]
) -> list[Container]:
    """Every container of the objects' pod specs, with its env (ConfigMaps it mounts as environment resolved from
    maps), resources, capabilities and its pod's hostNetwork."""
    found = []
    for file, obj in objects:
        namespace, name = _name(obj)
        for spec in _pod_specs(obj):
            host = yaml_line(spec, "hostNetwork") if spec.get("hostNetwork") is True else None
            for key in ("initContainers", "containers"):
                items = spec.get(key) if isinstance(spec.get(key), list) else []
                for i, item in enumerate(items):
                    if isinstance(item, dict):
                        label = f"{obj.get('kind')}/{name} container {item.get('name', i)}"
                        container = Container(label, file, yaml_line(items, i), host_network=host)
                        _container(container, item, namespace, maps)
                        found.append(container)
    return found


def _container(
    container: Container, item: dict, namespace: str | None, maps: dict[tuple[str | None, str], list[Setting]]
) -> None:
    def mounted(name: Any) -> list[Setting]:
        """The ConfigMap of that name in the container's namespace, else of that name anywhere (a kustomization
        sets the namespace of what it builds)."""
        exact = maps.get((namespace, str(name)))
        return exact if exact is not None else next((v for (_, n), v in maps.items() if n == str(name)), [])

    env = item.get("env") if isinstance(item.get("env"), list) else []
    for i, entry in enumerate(env):
        if not isinstance(entry, dict) or "name" not in entry:
            continue
        name = str(entry["name"])
        if "value" in entry:
            container.settings.append(Setting(name, str(entry["value"]), container.file, yaml_line(env, i)))
        source = entry.get("valueFrom") if isinstance(entry.get("valueFrom"), dict) else {}
        ref = source.get("configMapKeyRef")
        if isinstance(ref, dict):
            container.settings += [
                Setting(name, s.value, s.file, s.line, s.via)
                for s in mounted(ref.get("name"))
                if s.name == ref.get("key")
            ]
    sources = item.get("envFrom") if isinstance(item.get("envFrom"), list) else []
    for source in sources:
        ref = source.get("configMapRef") if isinstance(source, dict) else None
        if isinstance(ref, dict):
            prefix = str(source.get("prefix") or "")
            container.settings += [
                Setting(prefix + s.name, s.value, s.file, s.line, s.via) for s in mounted(ref.get("name"))
            ]
    resources = item.get("resources") if isinstance(item.get("resources"), dict) else {}
    for part in ("limits", "requests"):
        asked = resources.get(part) if isinstance(resources.get(part), dict) else {}
        for name in asked:
            container.resources.setdefault(str(name), yaml_line(asked, name) or container.line)
    context = item.get("securityContext") if isinstance(item.get("securityContext"), dict) else {}
    capabilities = context.get("capabilities") if isinstance(context.get("capabilities"), dict) else {}
    added = capabilities.get("add") if isinstance(capabilities.get("add"), list) else []
    for i, name in enumerate(added):
        container.capabilities[str(name).upper().removeprefix("CAP_")] = yaml_line(added, i) or container.line


# Where YAML that is no Kubernetes object keeps a process's environment: an Azure ML job's (and each job of its
# pipeline's) environment_variables, a Compose service's environment, a Ray runtime_env's env_vars, a Helm chart's
# values (env as a container's list of name and value), a conda environment's variables.
ENV_KEYS = ("environment_variables", "environment", "env_vars", "env", "variables")


def _pairs(value: dict | list) -> list[tuple[str, Any, int]]:
    """(name, value, line) of an environment written as a mapping, a list of NAME=value or of {name, value} (a
    list of anything else is no environment)."""
    if isinstance(value, dict):
        return [(str(k), v, yaml_line(value, k)) for k, v in value.items()]
    pairs = []
    for i, item in enumerate(value):
        if isinstance(item, dict) and "name" in item and "value" in item:
            pairs.append((str(item["name"]), item["value"], yaml_line(value, i)))
        elif isinstance(item, str) and _ASSIGNMENT.match(item):
            pairs.append((*item.split("=", 1), yaml_line(value, i)))
    return pairs


def environment_blocks(node: Any, file: str) -> list[Container]:
    """Each environment a document names under ENV_KEYS, as a container."""
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ENV_KEYS and isinstance(value, dict | list):
                pairs = _pairs(value)
                settings = [Setting(k, str(v), file, line) for k, v, line in pairs if not isinstance(v, dict | list)]
                if settings:
                    found.append(Container(f"{file} {key}", file, yaml_line(node, key), settings))
            else:
                found += environment_blocks(value, file)
    elif isinstance(node, list):
        found += [c for item in node for c in environment_blocks(item, file)]
    return found


def _unquoted(value: str) -> str:
    return value[1:-1] if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'" else value


def _line_in(lines: list[str], start: int, end: int, needle: str) -> int:
    """The line (start..end, 1-based) of an instruction that holds needle; start when none does."""
    return next((n for n in range(start, end + 1) if needle in lines[n - 1]), start)


def read_dockerfile(text: str, file: str, rules: tuple[Rule, ...]) -> tuple[list[Hit], list[Container]]:
    """A Dockerfile: what its RUN lines install, and each stage's ENV as a container's settings (a stage built
    FROM an earlier one starts with its settings)."""
    try:
        commands = dockerfile.parse_string(text)
    except (dockerfile.GoParseError, UnicodeDecodeError) as exc:
        return [unreadable(file, 1, f"not a Dockerfile BuildKit can parse: {exc}")], []
    lines = text.removeprefix("\ufeff").split("\n")
    hits: list[Hit] = []
    stages: dict[str, Container] = {}
    containers: list[Container] = []
    for cmd in commands:
        keyword = (cmd.cmd or "").upper()
        if keyword == "FROM":
            words = [w for w in cmd.value if w]
            base = stages.get(words[0].lower()) if words else None
            label = f"{file} stage {words[2] if len(words) >= 3 else len(containers) + 1}"
            container = Container(label, file, cmd.start_line, settings=list(base.settings) if base else [])
            if len(words) >= 3 and words[1].upper() == "AS":
                stages[words[2].lower()] = container
            containers.append(container)
        elif keyword == "ENV" and containers:
            pairs = zip(cmd.value[::2], cmd.value[1::2], strict=False)
            containers[-1].settings += [
                Setting(k, _unquoted(v), file, _line_in(lines, cmd.start_line, cmd.end_line, k)) for k, v in pairs
            ]
        elif keyword == "RUN":
            for script in [*cmd.value, *(h.content for h in cmd.heredocs)] if not cmd.json else [" ".join(cmd.value)]:
                for hit in packages.command(script, file, cmd.start_line, rules):
                    line = _line_in(lines, cmd.start_line, cmd.end_line, hit.match.split()[-1])
                    hits.append(Hit(hit.file, line, hit.rule, hit.match))
    return hits, containers


def read_script(text: str, file: str, rules: tuple[Rule, ...]) -> tuple[list[Hit], Container | None]:
    """A shell script (a launcher, an sbatch file): its exports as one container's settings, what it installs
    and the commands it runs."""
    settings, hits = [], []
    for number, line in packages.logical_lines(text):
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        words = words[1:] if words[:1] == ["export"] else words
        assignments = [_ASSIGNMENT.match(w) for w in words]
        if words and all(assignments):
            settings += [Setting(m.group(1), m.group(2), file, number) for m in assignments if m]
            continue
        hits += packages.command(line, file, number, rules)
        for command in (" ".join(w) for w in packages.segments(line) if w):
            rule = next((r for r in rules if r.commands and matches(command, r.commands)), None)
            hits += [Hit(file, number, rule, quote(command))] if rule else []
    return hits, Container(file, file, 1, settings) if settings else None


def _values(setting: Setting) -> tuple[tuple[str, str], ...]:
    return (("variable", setting.name), ("value", quote(setting.value)))


def _setting_rule(setting: Setting, rules: tuple[Rule, ...], profile: TargetProfile) -> Rule | None:
    """The first rule about this variable that its value matches."""
    exclusion = setting.value.startswith("^")
    items = [i.strip().lstrip("=") for i in setting.value.lstrip("^").split(",") if i.strip()]
    interfaces = profile.fabric.interfaces if profile.fabric else []
    for rule in rules:
        if not rule.variable or not matches(setting.name, [rule.variable]):
            continue
        if not rule.values and not rule.interfaces:
            return rule
        if exclusion:
            continue
        if rule.interfaces and interfaces:
            if any(not any(i.startswith(item) for i in interfaces) for item in items):
                return rule
        elif any(matches(item, rule.values) for item in items):
            return rule
    return None


def _rdma(container: Container, rules: tuple[Rule, ...], check: Rule, profile: TargetProfile) -> bool:
    """Whether the container configures RDMA: a setting check's variables name, or an RDMA resource."""
    rdma = [r for r in rules if r.resources]
    return any(matches(s.name, check.variables) for s in container.settings) or any(
        name == profile.rdma_resource or any(matches(name, r.resources) for r in rdma) for name in container.resources
    )


def judge(containers: list[Container], rules: tuple[Rule, ...], profile: TargetProfile) -> list[Hit]:
    """Each container's settings, resources and capabilities against the rules and the target's fabric."""
    hits = []
    for container in containers:
        for s in container.settings:
            shown = f"{s.name}={s.value}" + (f" ({s.via})" if s.via else "")
            if s.name in packages.INDEX_VARIABLES:
                hits += packages.index(s.value, s.file, s.line, rules)
            rule = _setting_rule(s, rules, profile)
            if rule is not None:
                hits.append(Hit(s.file, s.line, rule, quote(shown), _values(s)))
        for name, line in container.resources.items():
            rule = next((r for r in rules if r.resources and matches(name, r.resources)), None)
            if rule is not None and name != profile.rdma_resource:
                hits.append(Hit(container.file, line, rule, f"{name} ({container.label})"))
        for check in (r for r in rules if r.check):
            hits += _checked(container, check, rules, profile)
    return hits


def _checked(container: Container, check: Rule, rules: tuple[Rule, ...], profile: TargetProfile) -> list[Hit]:
    """One of the checks of a container against the fabric (none without a fabric in the profile)."""
    fabric, where = profile.fabric, container.label
    if fabric is None:
        return []
    if check.check == "host-network":
        on = container.host_network is not None and not fabric.host_network
        return [Hit(container.file, container.host_network or 0, check, f"hostNetwork: true ({where})")] if on else []
    if check.check == "capabilities":
        allowed = fabric.capabilities
        return [
            Hit(container.file, line, check, f"capability {name} ({where})", (("value", ", ".join(allowed) or "none"),))
            for name, line in container.capabilities.items()
            if allowed is not None and name not in allowed
        ]
    if not _rdma(container, rules, check, profile):
        return []
    if check.check == "rdma-capabilities":
        return [
            Hit(container.file, container.line, check, f"{where} adds no {name}", (("value", name),))
            for name in fabric.rdma_capabilities
            if name not in container.capabilities
        ]
    hits = []
    for name, wanted in fabric.rdma_env.items():
        given = [s for s in container.settings if s.name == name]
        if not given:
            hits.append(Hit(container.file, container.line, check, f"{where} does not set {name}"))
        elif given[-1].value != wanted:
            s = given[-1]
            hits.append(Hit(s.file, s.line, check, quote(f"{s.name}={s.value}" + (f" ({s.via})" if s.via else ""))))
    return hits
