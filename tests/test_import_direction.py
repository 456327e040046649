"""Imports go one way: ``memory`` ← ``learnings`` ← ``skills`` ← ``kheish`` (DESIGN.md, docs/architecture.md).

Every module of memory/, learnings/ and skills/ (migrations included) is parsed with ``ast``; every import is
collected: at module level, in class bodies, inside functions and methods, under ``if TYPE_CHECKING:``, and the
dynamic forms ``importlib.import_module("...")`` / ``__import__("...")`` with a literal name. The rules:

1. **No upward import**, wherever it is written: memory imports none of learnings/skills/kheish, learnings none of
   skills/kheish, skills not kheish. A lower plane triggers a higher one only through ``memory.hooks``.
2. **No import cycle** among the modules of the three apps, with function-level imports counted as edges. A
   function-level import that closes a cycle exists only to dodge it and fails here. A function-level import
   that closes no cycle is not a dodge and is not flagged (e.g. ``AppConfig.ready``, where Django requires
   models to be imported late; an optional heavy third-party library). No module is allow-listed; the one
   exemption is written here: an import under ``if TYPE_CHECKING:`` never runs, so it is no edge for rule 2
   (rule 1 still applies to it).
3. **One trigger mechanism**, used through its public API: no module outside memory/hooks.py touches a private
   name of ``memory.hooks`` (``hooks._hooks``) or sets an attribute on it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLANES = ("memory", "learnings", "skills", "kheish")  # lowest first
WALKED = ("memory", "learnings", "skills")
RANK = {name: rank for rank, name in enumerate(PLANES)}


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, dotted
    path: str
    line: int
    target: str  # the imported module (or module.name for ``from module import name``), dotted
    function: str | None  # the enclosing function, None at module/class level
    type_checking: bool

    def where(self) -> str:
        scope = f"in {self.function}()" if self.function else "at module level"
        return f"{self.path}:{self.line} {scope}: {self.module} imports {self.target}"


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports_of(root: Path, path: Path) -> list[Import]:
    module = _module_name(root, path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    rel = str(path.relative_to(root))
    found: list[Import] = []

    def visit(node: ast.AST, function: str | None, type_checking: bool) -> None:
        def add(target: str) -> None:
            found.append(Import(module, rel, node.lineno, target, function, type_checking))  # type: ignore[attr-defined]

        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            for alias in node.names:
                add(f"{prefix}.{alias.name}" if alias.name != "*" else prefix)
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in ("import_module", "__import__") and node.args:
                first = node.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    add(first.value)
        for child in ast.iter_child_nodes(node):
            if isinstance(node, ast.If) and _is_type_checking(node.test) and child in node.body:
                visit(child, function, True)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                name = getattr(child, "name", "<lambda>")
                visit(child, f"{function}.{name}" if function else name, type_checking)
            else:
                visit(child, function, type_checking)

    visit(ast.parse(path.read_text(), filename=rel), None, False)
    return found


def collect(root: Path, apps: tuple[str, ...] = WALKED) -> tuple[list[Import], set[str]]:
    """Every import written in the apps' modules, and the set of those modules' dotted names."""
    imports: list[Import] = []
    modules: set[str] = set()
    for app in apps:
        for path in sorted((root / app).rglob("*.py")):
            modules.add(_module_name(root, path))
            imports.extend(_imports_of(root, path))
    return imports, modules


def _resolve(target: str, modules: set[str]) -> str | None:
    """The walked module an import loads: ``memory.hooks`` for ``from memory import hooks``, ``memory.models``
    for ``from memory.models import Run``; None for anything outside the walked apps."""
    parts = target.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def upward_imports(imports: list[Import]) -> list[Import]:
    out = []
    for imp in imports:
        own, target = imp.module.split(".")[0], imp.target.split(".")[0]
        if own in RANK and target in RANK and RANK[target] > RANK[own]:
            out.append(imp)
    return out


def import_cycles(imports: list[Import], modules: set[str]) -> list[list[Import]]:
    """Each cycle of the import graph (function-level imports included, TYPE_CHECKING ones not), as the
    imports that make up one strongly connected component."""
    edges: dict[str, list[tuple[str, Import]]] = {m: [] for m in modules}
    for imp in imports:
        target = _resolve(imp.target, modules)
        if target is not None and not imp.type_checking:
            edges[imp.module].append((target, imp))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def strongconnect(node: str) -> None:  # Tarjan, iterative over an explicit work stack
        work = [(node, iter(edges[node]))]
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        while work:
            current, children = work[-1]
            for child, _imp in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(edges[child])))
                    break
                if child in on_stack:
                    low[current] = min(low[current], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[current])
                if low[current] == index[current]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == current:
                            break
                    components.append(component)

    for node in sorted(modules):
        if node not in index:
            strongconnect(node)
    cycles = []
    for component in components:
        inside = [imp for m in sorted(component) for target, imp in edges[m] if target in component]
        if len(component) > 1 or inside:
            cycles.append(inside)
    return cycles


def private_hook_uses(root: Path, apps: tuple[str, ...] = PLANES) -> list[str]:
    """``hooks._name`` reads, ``from memory.hooks import _name`` and ``hooks.name = ...`` writes outside
    memory/hooks.py."""
    found = []
    for app in apps:
        for path in sorted((root / app).rglob("*.py")):
            if path == root / "memory" / "hooks.py":
                continue
            tree = ast.parse(path.read_text())
            assigned = {
                id(t)
                for n in ast.walk(tree)
                if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
            }
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module == "memory.hooks":
                    found += [
                        f"{path.relative_to(root)}:{node.lineno} memory.hooks.{alias.name}"
                        for alias in node.names
                        if alias.name.startswith("_")
                    ]
                on_hooks = (
                    isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "hooks"
                )
                if on_hooks and (node.attr.startswith("_") or id(node) in assigned):
                    found.append(f"{path.relative_to(root)}:{node.lineno} hooks.{node.attr}")
    return found


def _report(lines: list[str]) -> str:
    return "\n  " + "\n  ".join(lines)


# ---- the rules on this repository -------------------------------------------------------------------------


def test_no_plane_imports_a_higher_one():
    imports, _ = collect(ROOT)
    upward = upward_imports(imports)
    assert not upward, "upward imports (a lower plane must fire a memory.hooks hook instead):" + _report(
        [imp.where() for imp in upward]
    )


def test_no_import_cycle_hidden_by_function_level_imports():
    imports, modules = collect(ROOT)
    cycles = import_cycles(imports, modules)
    assert not cycles, "import cycles (function-level imports only hide them):" + "".join(
        _report([imp.where() for imp in cycle]) for cycle in cycles
    )


def test_hooks_are_used_only_through_their_public_api():
    uses = private_hook_uses(ROOT)
    assert not uses, "memory.hooks used outside register/unregister/listeners/fire:" + _report(uses)


# ---- the checks can fail ------------------------------------------------------------------------------------


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for app in WALKED:
        (tmp_path / app).mkdir(exist_ok=True)
        (tmp_path / app / "__init__.py").touch()
    return tmp_path


def test_upward_imports_are_found_at_every_level(tmp_path):
    root = _tree(
        tmp_path,
        {
            "memory/admin.py": "def card():\n    from kheish import composition\n",
            "memory/a.py": "import learnings.models\n",
            "learnings/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from skills.models import S\n",
            "learnings/c.py": "from importlib import import_module\nf = import_module('skills.selectors')\n",
            "skills/d.py": "from memory import hooks\nfrom learnings.models import Learning\n",
        },
    )
    imports, _ = collect(root)
    found = {(imp.module, imp.target, imp.function) for imp in upward_imports(imports)}
    assert found == {
        ("memory.admin", "kheish.composition", "card"),
        ("memory.a", "learnings.models", None),
        ("learnings.b", "skills.models.S", None),
        ("learnings.c", "skills.selectors", None),
    }


def test_function_level_imports_that_close_a_cycle_are_found(tmp_path):
    root = _tree(
        tmp_path,
        {
            "learnings/services.py": "def publish():\n    from learnings import tasks\n",
            "learnings/tasks.py": "def review():\n    from learnings.services import publish\n",
            "learnings/apps.py": "class C:\n    def ready(self):\n        from learnings import tasks\n",
            "memory/recall.py": "def scrub():\n    from memory.redaction import scrub\n",
            "memory/redaction.py": "import re\n",
            "memory/x.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from memory.y import Y\n",
            "memory/y.py": "from memory.x import X\n",
            "skills/s.py": "from . import s\n",
        },
    )
    imports, modules = collect(root)
    cycles = sorted(sorted((imp.module, imp.target) for imp in cycle) for cycle in import_cycles(imports, modules))
    assert cycles == [
        [("learnings.services", "learnings.tasks"), ("learnings.tasks", "learnings.services.publish")],
        [("skills.s", "skills.s")],
    ]


def test_private_hook_uses_are_found(tmp_path):
    root = _tree(
        tmp_path,
        {
            "memory/hooks.py": "_hooks = {}\n",
            "learnings/apps.py": "from memory import hooks\nhooks.probe = lambda: True\nhooks.register('x', f)\n",
            "learnings/services.py": "from memory import hooks\nif 'x' in hooks._hooks:\n    hooks.fire('x')\n",
            "skills/apps.py": "from memory.hooks import _hooks, register\n",
        },
    )
    (root / "kheish").mkdir()
    assert private_hook_uses(root) == [
        "learnings/apps.py:2 hooks.probe",
        "learnings/services.py:2 hooks._hooks",
        "skills/apps.py:1 memory.hooks._hooks",
    ]
