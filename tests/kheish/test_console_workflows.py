"""A console workflow lives in the places docs/architecture.md's "Where things go" table names, and nowhere else:

* its module ``kheish/console/<workflow>.py`` holds its views, and each view calls a plane's service for what it
  writes (no ORM write, no transaction, no cursor in the module);
* its forms come from ``kheish/console/forms.py`` (none is built in the workflow's module);
* its routes are in ``kheish/console/urls.py`` (``console_urls()``), and every console route is a workflow's view;
* its templates are in ``templates/admin/console/`` and extend the console chrome (``base.html``: the tab bar);
* a page of its own (a route without parameters) renders with a tab of the tab bar (``common.TABS``, or the
  right-hand Policies tab that ``base.html`` writes itself) and is linked from the bar or from another console page.

Every module of ``kheish/console/`` is either a workflow (it has views) or one of the helpers named below, so a new
module cannot slip past these rules. A toy workflow added in those places shows up in the console's route and tab
bar; the same toy with one place missing is caught, place by place.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import re
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.contrib import admin
from django.http import HttpResponse
from django.urls import URLPattern, include, path, reverse

from kheish import urls as root_urls
from kheish.console import common
from kheish.console.urls import console_urls
from tests.support.console_data import staff_user

ROOT = Path(__file__).resolve().parents[2]
CONSOLE = ROOT / "kheish" / "console"
TEMPLATES = ROOT / "templates"
BASE_TEMPLATE = "admin/console/base.html"

HELPERS = {
    "__init__": "the package: the console's ownership rules, console_urls re-exported",
    "common": "what every page shares: render (the chrome and its tabs), Stamp, paginate, next_url",
    "forms": "every console form",
    "urls": "every console route",
    "activity": "the words of the activity feed the dashboard and the review queue show",
    "explain": "why a row reaches a prompt or not, as the review and learnings pages say it",
    "bulk": "the changelists' bulk actions (kheish/admin.py wires them; their routes are the admin's)",
}
WORKFLOWS = sorted({p.stem for p in CONSOLE.glob("*.py")} - set(HELPERS))

# What a view may call to write: a plane's services (docs/architecture.md: learnings/services/, skills/services/,
# and plane 1/2's service modules).
SERVICES = (
    "learnings.services",
    "skills.services",
    "memory.run_memory",
    "memory.sessions",
    "memory.runs",
    "memory.journal",
    "memory.compaction",
)
ALWAYS_WRITES = {"save", "delete", "bulk_create", "bulk_update", "get_or_create", "update_or_create"}
QUERYSET_WRITES = {"create", "update"}  # a write when called on a manager or a queryset (dict.update is not)


@dataclass(frozen=True)
class Places:
    """Where the rule looks: the console's routes, its tabs and the template directories."""

    patterns: list
    tabs: tuple
    template_roots: tuple[Path, ...] = (TEMPLATES,)


def real_places() -> Places:
    return Places(patterns=console_urls()[0], tabs=common.TABS)


def tab_bar() -> tuple[set[str], set[str]]:
    """The tabs and the route names ``base.html``'s tab bar writes itself, past the ``common.TABS`` loop."""
    text = (TEMPLATES / BASE_TEMPLATE).read_text()
    bar = re.search(r'<ul class="tabs">(.*?)</ul>', text, re.S)
    assert bar is not None, "base.html has no tab bar"
    return set(re.findall(r'tab == "(\w+)"', bar.group(1))), set(re.findall(r"url 'console:([\w-]+)'", bar.group(1)))


def console_links() -> set[str]:
    """Every ``{% url 'console:…' %}`` any console template writes."""
    return {
        name
        for template in (TEMPLATES / "admin" / "console").glob("*.html")
        for name in re.findall(r"url 'console:([\w-]+)'", template.read_text())
    }


def views_of(module: types.ModuleType) -> dict[str, types.FunctionType]:
    """A module's views: its public functions that take the request first and answer an ``HttpResponse`` (not
    ``common.render``, which answers the ``TemplateResponse`` a view returns)."""
    views = {}
    for name, obj in vars(module).items():
        if name.startswith("_") or not inspect.isfunction(obj) or obj.__module__ != module.__name__:
            continue
        signature = inspect.signature(obj)
        if list(signature.parameters)[:1] == ["request"] and signature.return_annotation in (
            "HttpResponse",
            HttpResponse,
        ):
            views[name] = obj
    return views


def _chain(node: ast.AST) -> list[str]:
    """The attribute names and call names a receiver is built from (``Learning.objects.filter(…)`` →
    ``filter, objects, Learning``)."""
    names = []
    while True:
        if isinstance(node, ast.Attribute):
            names.append(node.attr)
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Subscript):
            node = node.value
        else:
            if isinstance(node, ast.Name):
                names.append(node.id)
            return names


def _is_service(module: str) -> bool:
    return any(module == service or module.startswith(f"{service}.") for service in SERVICES)


def _service_names(tree: ast.Module) -> set[str]:
    """The names a module binds to a service module or to what it holds."""
    names = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                if _is_service(node.module) or _is_service(f"{node.module}.{alias.name}"):
                    names.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            names |= {alias.asname for alias in node.names if alias.asname and _is_service(alias.name)}
    return names


def _closure(functions: dict[str, ast.FunctionDef], name: str) -> list[ast.FunctionDef]:
    """The view's function and every module function it names, transitively (the helpers it delegates to)."""
    seen, todo = [], [name]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.append(current)
        todo += [n.id for n in ast.walk(functions[current]) if isinstance(n, ast.Name) and n.id in functions]
    return [functions[n] for n in seen]


def _template_path(name: str, roots: tuple[Path, ...]) -> Path | None:
    relative = name if "/" in name else f"admin/console/{name}"
    return next((root / relative for root in roots if (root / relative).is_file()), None)


def workflow_problems(module: types.ModuleType, places: Places) -> list[str]:
    """What a console workflow module lacks of the places the table names (an empty list: nothing)."""
    label = module.__name__.rpartition(".")[2]
    tree = ast.parse(Path(module.__file__).read_text())
    views = views_of(module)
    problems = [] if views else [f"{label}: no view (a console module is a workflow or a helper named in this test)"]
    for name, view in views.items():
        problems += _view_problems(f"{label}.{name}", view, _view_nodes(tree, name), _service_names(tree), places)
    return problems + _module_problems(label, tree)


def _view_nodes(tree: ast.Module, name: str) -> list[ast.AST]:
    """The nodes of a view's body and of the module functions it delegates to. Bodies only: the ``"POST"`` of
    ``@require_http_methods(["GET", "POST"])`` says a view accepts one, not that it handles one."""
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    return [node for function in _closure(functions, name) for s in function.body for node in ast.walk(s)]


def _view_problems(where: str, view, nodes: list[ast.AST], services: set[str], places: Places) -> list[str]:
    problems = []
    routes = [p for p in places.patterns if inspect.unwrap(p.callback) is inspect.unwrap(view)]
    if not routes:
        problems.append(f"{where}: no route in kheish/console/urls.py")
    templates = [n.value for n in nodes if isinstance(n, ast.Constant) and str(n.value).endswith(".html")]
    if not templates:
        problems.append(f"{where}: renders no template")
    for template in templates:
        found = _template_path(template, places.template_roots)
        if found is None:
            problems.append(f"{where}: template {template} is not in templates/admin/console/")
        elif f'{{% extends "{BASE_TEMPLATE}" %}}' not in found.read_text():
            problems.append(f"{where}: template {template} does not extend {BASE_TEMPLATE} (the tab bar)")
    handles_post = any(
        (isinstance(n, ast.Attribute) and n.attr == "POST") or (isinstance(n, ast.Constant) and n.value == "POST")
        for n in nodes
    )
    if handles_post and not any(isinstance(n, ast.Name) and n.id in services for n in nodes):
        problems.append(f"{where}: handles a POST and calls no service ({', '.join(SERVICES)})")
    nav_tabs, bar_routes = tab_bar()
    tabs = {key for key, _ in places.tabs}
    rendered_tabs = {
        k.value.value
        for n in nodes
        if isinstance(n, ast.Call)
        for k in n.keywords
        if k.arg == "tab" and isinstance(k.value, ast.Constant)
    }
    for route in routes:
        if route.pattern.converters:
            continue  # a page about one object, reached from its list
        if not rendered_tabs:
            problems.append(f"{where}: a page of its own rendered with no tab")
        problems += [
            f"{where}: tab {t!r} is in no tab of the bar (common.TABS)" for t in sorted(rendered_tabs - tabs - nav_tabs)
        ]
        if route.name not in tabs | bar_routes | console_links():
            problems.append(f"{where}: page {route.name!r} is linked from no tab (common.TABS) nor console page")
    return problems


FORMS_GO = "forms go in kheish/console/forms.py"
ORM_FREE = {("transaction", "atomic"), ("connection", "cursor")}


def _module_problems(label: str, tree: ast.Module) -> list[str]:
    """No ORM write, transaction or cursor anywhere in the module; no form built or imported from elsewhere."""
    problems = []
    for node in ast.walk(tree):
        at = f"{label}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            method, receiver = node.func.attr, _chain(node.func.value)
            if method in ALWAYS_WRITES or (method in QUERYSET_WRITES and "objects" in receiver):
                problems.append(f"{at}: writes through the ORM (.{method}); call a service")
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and (node.value.id, node.attr) in ORM_FREE
        ):
            problems.append(f"{at}: {node.value.id}.{node.attr} (a write belongs in a service)")
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            names = [alias.name for alias in node.names]
            if node.module.startswith("django.forms") or (node.module == "django" and "forms" in names):
                problems.append(f"{at}: builds forms here; {FORMS_GO}")
            elif node.module != "kheish.console.forms":
                problems += [
                    f"{at}: {n} from {node.module}; {FORMS_GO}" for n in names if n.endswith(("Form", "FormSet"))
                ]
        elif isinstance(node, ast.ClassDef) and any(_chain(base)[0].endswith("Form") for base in node.bases):
            problems.append(f"{at}: form {node.name} defined here; {FORMS_GO}")
    return problems


# --- the rule over the console as it is ------------------------------------------------------------------------


def test_every_console_module_is_a_workflow_or_a_named_helper():
    modules = {p.stem for p in CONSOLE.glob("*.py")}
    assert set(HELPERS) <= modules, f"helpers named here that no longer exist: {sorted(set(HELPERS) - modules)}"
    assert WORKFLOWS, "no console workflow found"
    for name in HELPERS:
        module = importlib.import_module("kheish.console" if name == "__init__" else f"kheish.console.{name}")
        assert not views_of(module), f"helper {name} has views {sorted(views_of(module))}: make it a workflow"


@pytest.mark.parametrize("name", WORKFLOWS)
def test_each_workflow_is_in_the_places_the_table_names(name):
    problems = workflow_problems(importlib.import_module(f"kheish.console.{name}"), real_places())
    assert not problems, "\n".join(problems)


def test_every_console_route_is_a_workflow_view_and_every_tab_a_route():
    views = {
        inspect.unwrap(view)
        for name in WORKFLOWS
        for view in views_of(importlib.import_module(f"kheish.console.{name}")).values()
    }
    patterns = console_urls()[0]
    assert all(isinstance(p, URLPattern) for p in patterns)
    strays = [p.name for p in patterns if inspect.unwrap(p.callback) not in views]
    assert not strays, f"console routes that are no workflow's view: {strays}"
    names = {p.name for p in patterns}
    _, bar_routes = tab_bar()
    missing = sorted(({key for key, _ in common.TABS} | bar_routes) - names)
    assert not missing, f"tabs without a route: {missing}"


def test_every_console_form_is_used_by_the_console():
    from kheish.console import forms

    built = {
        name
        for name, obj in vars(forms).items()
        if isinstance(obj, type) and obj.__module__ == forms.__name__ and name.endswith(("Form", "FormSet"))
    } | {name for name in vars(forms) if name.endswith("FormSet")}
    users = [*(CONSOLE / f"{name}.py" for name in [*WORKFLOWS, "bulk"]), ROOT / "kheish" / "admin.py"]
    text = "\n".join(path.read_text() for path in users)
    unused = sorted(name for name in built if not re.search(rf"\b{name}\b", text))
    assert not unused, f"forms no workflow uses: {unused}"


def _pages_of_their_own() -> list[str]:
    return [p.name for p in console_urls()[0] if not p.pattern.converters]


def _current_tab(html: str) -> list[str]:
    nav = re.search(r'<nav aria-label="Memory console">(.*?)</nav>', html, re.S)
    assert nav is not None, "no console tab bar"
    return re.findall(r'<a href="([^"]+)"[^>]*aria-current="page"', nav.group(1))


@pytest.mark.django_db
@pytest.mark.parametrize("name", _pages_of_their_own())
def test_each_page_of_its_own_is_a_current_tab_in_the_bar(client, name):
    client.force_login(staff_user())
    response = client.get(reverse(f"console:{name}"))
    assert response.status_code == 200
    assert len(_current_tab(response.content.decode())) == 1, f"{name}: no tab of the bar is the current one"


# --- a toy workflow -----------------------------------------------------------------------------------------------

TOY = "toy_console_workflow"
TOY_SOURCE = '''"""A toy console workflow: one page whose form asks a service to reject a candidate."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.views.decorators.http import require_http_methods

from kheish.console.common import render
from kheish.console.forms import ReasonForm
from learnings import services as learning_services
from learnings.models import LearningCandidate
{imports}

@require_http_methods(["GET", "POST"])
def toy(request: HttpRequest) -> HttpResponse:
    form = ReasonForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        {write}
        return HttpResponseRedirect(request.path)
    return render(request, "toy.html", "Toy", tab="toy", form=form)
{extra}
'''
THROUGH_A_SERVICE = (
    'learning_services.candidate_reject(candidate=1, actor=request.user, reason=form.cleaned_data["reason"])'
)
TOY_TEMPLATE = '{% extends "admin/console/base.html" %}{% block console %}<p id="toy">A toy workflow.</p>{% endblock %}'
TOY_TAB = ("toy", "Toy")


@dataclass
class Toy:
    module: types.ModuleType
    places: Places
    template: Path
    urlconf: types.ModuleType


def make_toy(tmp_path: Path, monkeypatch, *, imports: str = "", write: str = THROUGH_A_SERVICE, extra: str = "") -> Toy:
    """The toy in the places the table names: its module, its route beside console_urls()'s, its template in a
    templates/admin/console/ directory, its tab in the tabs."""
    source = tmp_path / f"{TOY}.py"
    source.write_text(TOY_SOURCE.format(imports=imports, write=write, extra=extra))
    spec = importlib.util.spec_from_file_location(TOY, source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, TOY, module)
    spec.loader.exec_module(module)
    template = tmp_path / "templates" / "admin" / "console" / "toy.html"
    template.parent.mkdir(parents=True)
    template.write_text(TOY_TEMPLATE)
    patterns = [*console_urls()[0], path("toy/", admin.site.admin_view(module.toy), name="toy")]
    urlconf = types.ModuleType("toy_console_urls")
    urlconf.urlpatterns = [
        path("admin/memory/", include((patterns, "console"))),
        *(p for p in root_urls.urlpatterns if getattr(p, "namespace", None) != "console"),
    ]
    places = Places(patterns=patterns, tabs=(*common.TABS, TOY_TAB), template_roots=(tmp_path / "templates", TEMPLATES))
    return Toy(module=module, places=places, template=template, urlconf=urlconf)


@pytest.mark.django_db
def test_a_toy_workflow_in_the_named_places_has_its_route_and_its_tab(client, settings, tmp_path, monkeypatch):
    toy = make_toy(tmp_path, monkeypatch)
    assert workflow_problems(toy.module, toy.places) == []
    monkeypatch.setitem(sys.modules, toy.urlconf.__name__, toy.urlconf)
    settings.ROOT_URLCONF = toy.urlconf.__name__
    settings.TEMPLATES = [{**settings.TEMPLATES[0], "DIRS": [tmp_path / "templates", *settings.TEMPLATES[0]["DIRS"]]}]
    monkeypatch.setattr(common, "TABS", toy.places.tabs)
    client.force_login(staff_user())

    url = reverse("console:toy")
    assert url == "/admin/memory/toy/"
    page = client.get(url).content.decode()
    assert '<p id="toy">A toy workflow.</p>' in page
    assert _current_tab(page) == [url]
    dashboard = client.get(reverse("console:dashboard")).content.decode()
    assert re.search(rf'<a href="{url}"\s*>Toy</a>', dashboard), "the other pages' tab bar has no Toy tab"
    assert _current_tab(dashboard) == [reverse("console:dashboard")]
    assert client.post(url, {"confirm": "no"}).status_code == 200  # an invalid form renders the page again


@pytest.mark.parametrize(
    ("missing", "expected"),
    [
        ("route", [f"{TOY}.toy: no route in kheish/console/urls.py"]),
        ("template", [f"{TOY}.toy: template toy.html is not in templates/admin/console/"]),
        ("chrome", [f"{TOY}.toy: template toy.html does not extend admin/console/base.html (the tab bar)"]),
        (
            "tab",
            [
                f"{TOY}.toy: tab 'toy' is in no tab of the bar (common.TABS)",
                f"{TOY}.toy: page 'toy' is linked from no tab (common.TABS) nor console page",
            ],
        ),
        ("service", [f"{TOY}.toy: handles a POST and calls no service ({', '.join(SERVICES)})"]),
        ("orm", [f"{TOY}: writes through the ORM (.update); call a service"]),
        (
            "form",
            [
                f"{TOY}: builds forms here; forms go in kheish/console/forms.py",
                f"{TOY}: form ToyForm defined here; forms go in kheish/console/forms.py",
            ],
        ),
    ],
)
def test_a_toy_workflow_missing_a_place_is_caught(tmp_path, monkeypatch, missing, expected):
    writes = {
        "service": "LearningCandidate.objects.filter(pk=1).exists()",
        "orm": f'{THROUGH_A_SERVICE}\n        LearningCandidate.objects.filter(pk=1).update(state="rejected")',
    }
    toy = make_toy(
        tmp_path,
        monkeypatch,
        imports="from django import forms" if missing == "form" else "",
        write=writes.get(missing, THROUGH_A_SERVICE),
        extra="\n\nclass ToyForm(forms.Form):\n    reason = forms.CharField()\n" if missing == "form" else "",
    )
    places = toy.places
    if missing == "route":
        places = Places(patterns=places.patterns[:-1], tabs=places.tabs, template_roots=places.template_roots)
    elif missing == "template":
        toy.template.unlink()
    elif missing == "chrome":
        toy.template.write_text('<p id="toy">A toy workflow.</p>')
    elif missing == "tab":
        places = Places(patterns=places.patterns, tabs=common.TABS, template_roots=places.template_roots)
    problems = [re.sub(r":\d+:", ":", problem) for problem in workflow_problems(toy.module, places)]
    assert problems == expected
