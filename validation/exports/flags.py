"""Record the command-line flags of the frameworks whose launch lines `calculator/exports/` writes but whose package
cannot be installed here (Megatron-LM's pretrain_gpt.py, `vllm serve`, SGLang's launch_server), so that
tests/exports/test_exports_*.py parse every exported line against the framework's own definitions.

Each record is one JSON file in tests/data/exports/: the repository or wheel and its commit / version, the file the
flags are defined in, how they were read, and per option string {kind, type, choices, dest}.

    python -m validation.exports.flags megatron /path/to/Megatron-LM-checkout <commit>
    python -m validation.exports.flags vllm /path/to/unpacked/vllm-wheel <version>
    python -m validation.exports.flags sglang /path/to/unpacked/sglang-wheel <version>

Megatron: its own parser is built (megatron/training/arguments.py add_megatron_arguments) and read option by option;
the modules that only hold Triton kernels are replaced by empty modules first (Triton is not installed here and
those modules define no arguments). vLLM and SGLang import CUDA-only packages (triton, CUDA kernels) at import time,
so their definitions are read from the source with `ast`: vLLM's `add_argument` calls in vllm/engine/arg_utils.py
(flags whose kwargs come from a config dataclass field take the field's annotation: bool → --x/--no-x, Literal →
choices, as vllm's get_kwargs does), SGLang's `Annotated[T, Arg(...)]` fields in sglang/srt/arg_groups/fields/
(cli name `--` + field name with dashes, bool → store_true, Literal → choices, as its add_cli_args_from_dataclass
does) plus the literal `add_argument` calls of sglang/srt/server_args.py.
"""
from __future__ import annotations

import argparse
import ast
import json
import sys
import types
from pathlib import Path

OUT = Path(__file__).resolve().parents[2] / "tests" / "data" / "exports"


def _type_name(t) -> str | None:
    return getattr(t, "__name__", None) if t in (int, float, str) else ("str" if t is not None else None)


def _write(name: str, record: dict) -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}_flags.json"
    record["flags"] = dict(sorted(record["flags"].items()))
    path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return path


# ---- Megatron-LM ------------------------------------------------------------------------------------------------

def megatron(checkout: Path, commit: str) -> Path:
    import typing
    from unittest import mock

    import typing_extensions
    typing.override = getattr(typing, "override", typing_extensions.override)  # a Python 3.12 name Megatron uses
    kernels = [str(p.relative_to(checkout).with_suffix("")).replace("/", ".").removesuffix(".__init__")
               for p in (checkout / "megatron").rglob("*.py")
               if any(line.lstrip().startswith(("import triton", "from triton"))
                      for line in p.read_text(encoding="utf-8", errors="replace").splitlines())]
    for name in kernels:
        mod = types.ModuleType(name)

        def _attr(attr, _name=name):
            if attr.startswith("__"):
                raise AttributeError(attr)
            return mock.MagicMock(name=f"{_name}.{attr}")
        mod.__getattr__ = _attr
        sys.modules[name] = mod
    sys.path.insert(0, str(checkout))
    from megatron.training.arguments import add_megatron_arguments
    parser = argparse.ArgumentParser(allow_abbrev=False)
    add_megatron_arguments(parser)
    flags = {}
    for a in parser._actions:
        if isinstance(a, argparse._HelpAction):
            continue
        kind = {argparse._StoreTrueAction: "store_true", argparse._StoreFalseAction: "store_false",
                argparse.BooleanOptionalAction: "bool_optional"}.get(type(a), "value")
        for opt in a.option_strings:
            flags[opt] = {"kind": kind, "dest": a.dest, "type": _type_name(a.type) if kind == "value" else None,
                          "choices": [getattr(c, "name", str(c)) for c in a.choices] if a.choices else None,
                          "nargs": a.nargs if isinstance(a.nargs, str) else None}
    return _write("megatron", {
        "source": "github.com/NVIDIA/Megatron-LM", "commit": commit, "file": "megatron/training/arguments.py",
        "read": "argparse parser built by add_megatron_arguments (triton kernel modules replaced by empty ones)",
        "flags": flags})


# ---- vLLM (static) ------------------------------------------------------------------------------------------------

def _class_fields(files: list[Path]) -> dict[str, dict[str, tuple[str, ast.Module]]]:
    """class name -> field -> (annotation source, module) over the given files."""
    out: dict[str, dict[str, tuple[str, ast.Module]]] = {}
    for f in files:
        tree = ast.parse(f.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                out.setdefault(node.name, {}).update(
                    {st.target.id: (ast.unparse(st.annotation), tree) for st in node.body
                     if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)})
    return out


def _literal_values(annotation: str, tree: ast.Module) -> list[str] | None:
    """The Literal values an annotation allows: inline Literal[...] or a module-level alias of one."""
    ann = ast.parse(annotation, mode="eval").body
    names = [n for n in ast.walk(ann)]
    for n in names:
        if isinstance(n, ast.Subscript) and ast.unparse(n.value).endswith("Literal"):
            return [str(e.value) for e in ast.walk(n.slice) if isinstance(e, ast.Constant)]
    for n in names:
        if isinstance(n, ast.Name):
            for st in tree.body:
                if (isinstance(st, (ast.Assign, ast.AnnAssign)) and ast.unparse(
                        st.targets[0] if isinstance(st, ast.Assign) else st.target) == n.id and st.value is not None
                        and isinstance(st.value, ast.Subscript) and ast.unparse(st.value.value).endswith("Literal")):
                    return [str(e.value) for e in ast.walk(st.value.slice) if isinstance(e, ast.Constant)]
    return None


def _kind_of_annotation(annotation: str, tree: ast.Module) -> tuple[str, str | None, list[str] | None]:
    parts = {p.strip() for p in annotation.replace("Optional[", "").replace("]", "").split("|")}
    if "bool" in parts and parts & {"str"}:
        return "optional_value", "str", None
    if "bool" in parts:
        return "bool_optional", None, None
    choices = _literal_values(annotation, tree)
    kind_type = "int" if "int" in parts else "float" if "float" in parts else "str"
    return "value", kind_type, choices


def vllm(src: Path, version: str) -> Path:
    arg_utils = src / "vllm" / "engine" / "arg_utils.py"
    tree = ast.parse(arg_utils.read_text(encoding="utf-8"))
    classes = _class_fields(sorted((src / "vllm" / "config").glob("*.py")))
    kwargs_class: dict[str, str] = {}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                and ast.unparse(node.value.func) == "get_kwargs" and isinstance(node.targets[0], ast.Name)):
            kwargs_class[node.targets[0].id] = ast.unparse(node.value.args[0])
    flags = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):
            continue
        opts = [a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("-")]
        if not opts:
            continue
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        kind, typ, choices, field = "value", None, None, None
        spread = [k.value for k in node.keywords if k.arg is None]
        if spread and isinstance(spread[0], ast.Dict):  # {**cache_kwargs["x"], "default": None}
            spread = [v for k, v in zip(spread[0].keys, spread[0].values) if k is None]
        if spread and isinstance(spread[0], ast.Subscript):
            var, field = ast.unparse(spread[0].value), spread[0].slice
            field = field.value if isinstance(field, ast.Constant) else None
            cls = kwargs_class.get(var)
            if cls and field and field in classes.get(cls, {}):
                ann, mod = classes[cls][field]
                kind, typ, choices = _kind_of_annotation(ann, mod)
        if "action" in kw:
            action = ast.unparse(kw["action"])
            kind = ("store_true" if "store_true" in action else "store_false" if "store_false" in action
                    else "bool_optional" if "BooleanOptional" in action else "value")
        if "type" in kw and ast.unparse(kw["type"]) in ("int", "float", "str"):
            typ = ast.unparse(kw["type"])
        if "choices" in kw and isinstance(kw["choices"], (ast.List, ast.Tuple)):
            choices = [str(e.value) for e in kw["choices"].elts if isinstance(e, ast.Constant)]
        for opt in opts:
            flags[opt] = {"kind": kind, "dest": field, "type": typ if kind == "value" else None,
                          "choices": choices}
    return _write("vllm", {
        "source": "pypi.org/project/vllm", "version": version, "file": "vllm/engine/arg_utils.py",
        "read": "ast of the add_argument calls; field kwargs typed from vllm/config/*.py annotations",
        "flags": flags})


# ---- SGLang (static) ----------------------------------------------------------------------------------------------

def _action_kind(action: str) -> str:
    """argparse action source -> kind; SGLang's Deprecated*StoreTrueAction store True as store_true does."""
    a = action.lower().replace("_", "")
    return ("store_true" if "storetrue" in a else "store_false" if "storefalse" in a
            else "bool_optional" if "booleanoptional" in a else "value")


def _choices(node: ast.expr, modules: list[ast.Module]) -> list[str] | None:
    """A literal list of choices, or a module-level list it names (in the fields module or choices.py)."""
    if isinstance(node, (ast.List, ast.Tuple)):
        return [str(e.value) for e in node.elts if isinstance(e, ast.Constant)]
    if isinstance(node, ast.Name):
        for tree in modules:
            for st in tree.body:
                if (isinstance(st, (ast.Assign, ast.AnnAssign)) and st.value is not None and ast.unparse(
                        st.targets[0] if isinstance(st, ast.Assign) else st.target) == node.id):
                    return _choices(st.value, modules)
    return None


def sglang(src: Path, version: str) -> Path:
    flags = {}
    choice_lists = ast.parse((src / "sglang" / "srt" / "arg_groups" / "choices.py").read_text(encoding="utf-8"))
    for f in sorted((src / "sglang" / "srt" / "arg_groups" / "fields").glob("*.py")):
        tree = ast.parse(f.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and isinstance(node.annotation, ast.Subscript) and ast.unparse(node.annotation.value) == "A"):
                continue
            elts = node.annotation.slice.elts if isinstance(node.annotation.slice, ast.Tuple) else []
            if len(elts) < 2:
                continue
            meta = elts[1]
            kw = ({k.arg: k.value for k in meta.keywords if k.arg} if isinstance(meta, ast.Call)
                  and ast.unparse(meta.func) == "Arg" else {})
            if not (isinstance(meta, ast.Constant) or kw or (isinstance(meta, ast.Call)
                                                           and ast.unparse(meta.func) == "Arg")):
                continue
            if "no_cli" in kw and ast.unparse(kw["no_cli"]) == "True":
                continue
            name = node.target.id
            cli = kw["cli_name"].value if "cli_name" in kw else "--" + name.replace("_", "-")
            aliases = [e.value for e in kw["aliases"].elts] if "aliases" in kw else []
            ann = ast.unparse(elts[0])
            parts = {p.strip() for p in ann.replace("Optional[", "").replace("]", "").split("|")}
            if "action" in kw:
                kind = _action_kind(ast.unparse(kw["action"]))
            elif parts <= {"bool", "None"}:
                kind = "store_true"
            else:
                kind = "value"
            choices = _literal_values(ann, tree)
            if "choices" in kw:
                choices = _choices(kw["choices"], [tree, choice_lists]) or choices
            typ = "int" if "int" in parts else "float" if "float" in parts else "str"
            for opt in [cli] + aliases:
                flags[opt] = {"kind": kind, "dest": name, "type": typ if kind == "value" else None,
                              "choices": choices if kind == "value" else None}
    server_args = src / "sglang" / "srt" / "server_args.py"
    for node in ast.walk(ast.parse(server_args.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument":
            kw = {k.arg: k.value for k in node.keywords if k.arg}
            kind = _action_kind(ast.unparse(kw["action"])) if "action" in kw else "value"
            for a in node.args:
                if isinstance(a, ast.Constant) and str(a.value).startswith("--"):
                    flags.setdefault(a.value, {"kind": kind, "dest": None, "type": "str" if kind == "value" else None,
                                               "choices": None})
    return _write("sglang", {
        "source": "pypi.org/project/sglang", "version": version,
        "file": "sglang/srt/arg_groups/fields/*.py, sglang/srt/server_args.py",
        "read": "ast of the Annotated[T, Arg(...)] fields (add_cli_args_from_dataclass rules) and add_argument calls",
        "flags": flags})


if __name__ == "__main__":
    what, where, version = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    print({"megatron": megatron, "vllm": vllm, "sglang": sglang}[what](where, version))
