# SPDX-License-Identifier: Apache-2.0
"""Checks behind .ci/wheel-smoke: the built release, not the source tree, works.

Every step runs as its own process, started by .ci/wheel-smoke from a copy of
this file in a temporary directory (never from the repository), with ``-I`` so
neither the current directory nor PYTHONPATH can put the source tree on
``sys.path``. Steps (``python -I wheel_smoke.py STEP ARGS...``):

``tree ROOT DEST``
    Copy what a fresh clone would hold (git's tracked and untracked,
    not-ignored files) to DEST: the build never sees ``src/*.egg-info`` (whose
    stale SOURCES.txt setuptools would fold into the sdist, hiding a file the
    package data forgot), ``build/`` or ``.venv``.
``artifacts TREE DIST``
    One sdist and one wheel in DIST, both of ``__version__``; the wheel holds
    every file of the package in TREE, the entry point, both console scripts
    and ``Requires-Dist: vllm==TESTED_VLLM``. Prints the wheel's path.
``fresh-env VENV FRESH ROOT``
    A new virtual environment FRESH whose site-packages links to every entry of
    VENV's site-packages except the plugin's own (its editable ``.pth``, its
    dist-info, any ``.pth`` naming ROOT), so vLLM and torch are borrowed, not
    reinstalled, and nothing points back at the source tree.
``installed ROOT TREE VERSION``  (run by FRESH's python)
    The installed wheel: metadata, entry point, version, package data, every
    module imports, all of it from FRESH.
``checkpoint CKPT``  (run by FRESH's python)
    What the console script ``spark2_5-make-tiny-checkpoint`` wrote.
``generate ROOT CKPT``  (run by FRESH's python)
    Real vLLM discovers the plugin through the wheel's entry point and
    generates from the tiny checkpoint.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import time
import zipfile
from pathlib import Path

PACKAGE = "vllm_spark2_5_plugin"
DIST_NAME = "vllm-spark2_5-plugin"
SUBPACKAGES = ("configs", "models", "ops", "tool_parsers", "references", "tools")
ENTRY_GROUP = "vllm.general_plugins"
ENTRY = ("spark2_5", f"{PACKAGE}:register")
SCRIPTS = {
    "spark2_5-make-tiny-checkpoint": f"{PACKAGE}.tools.tiny_checkpoint:main",
    "spark2_5-train-dspark": f"{PACKAGE}.tools.train_dspark:main",
}
TEMPLATE = "chat_template.jinja"
TARGET_ARCH = "Spark2_5ForCausalLM"


def fail(message: str) -> None:
    print(f"wheel-smoke: FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def check(ok: bool, message: str) -> None:
    if not ok:
        fail(message)


def ok(message: str) -> None:
    print(f"  ok  {message}")


def normalized(name: str) -> str:
    return name.lower().replace("-", "_").replace(".", "_")


def is_ours(name: str) -> bool:
    """A site-packages entry that belongs to this project (any install mode)."""
    n = normalized(name)
    return n.startswith(PACKAGE) or n.startswith(f"__editable___{PACKAGE}")


def module_constants(path: Path) -> dict[str, str]:
    """String constants of a module, read without importing it."""
    consts = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            consts[node.targets[0].id] = node.value.value
    return consts


def package_files(tree: Path) -> set[str]:
    """The package's files in TREE, as wheel paths (``vllm_spark2_5_plugin/...``)."""
    base = tree / "src"
    return {
        p.relative_to(base).as_posix()
        for p in (base / PACKAGE).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }


def under(path: str | os.PathLike, root: str | os.PathLike) -> bool:
    return Path(os.path.abspath(path)).is_relative_to(os.path.abspath(root))


# -- steps run by the CI interpreter ------------------------------------------


def step_tree(root: str, dest: str) -> None:
    listing = subprocess.run(
        ["git", "-C", root, "ls-files", "-z", "--cached", "--others"]
        + ["--exclude-standard"],
        check=True,
        capture_output=True,
    ).stdout.decode()
    count = 0
    for rel in sorted(set(filter(None, listing.split("\0")))):
        src = Path(root, rel)
        if not src.is_file():  # deleted in the work tree but still in the index
            continue
        target = Path(dest, rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)
        count += 1
    check(Path(dest, "pyproject.toml").is_file(), "no pyproject.toml in the tree")
    print(f"copied {count} files (git's view of the work tree) to {dest}")


def step_artifacts(tree: str, dist: str) -> None:
    consts = module_constants(Path(tree, "src", PACKAGE, "__init__.py"))
    version, tested_vllm = consts["__version__"], consts["TESTED_VLLM"]
    sdists = sorted(Path(dist).glob("*.tar.gz"))
    wheels = sorted(Path(dist).glob("*.whl"))
    check(len(sdists) == 1 and len(wheels) == 1, f"want 1 sdist + 1 wheel: {dist}")
    sdist, wheel = sdists[0], wheels[0]
    stem = DIST_NAME.replace("-", "_")
    check(sdist.name == f"{stem}-{version}.tar.gz", f"sdist name {sdist.name}")
    check(
        wheel.name == f"{stem}-{version}-py3-none-any.whl",
        f"wheel name {wheel.name} (want version {version}, pure Python)",
    )
    ok(f"{sdist.name} and {wheel.name} carry __version__ {version}")

    want = package_files(Path(tree))
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        info = f"{stem}-{version}.dist-info"
        metadata = zf.read(f"{info}/METADATA").decode()
        entry_points = zf.read(f"{info}/entry_points.txt").decode()
    missing = sorted(want - names)
    check(not missing, f"package files missing from the wheel: {missing}")
    check(f"{PACKAGE}/{TEMPLATE}" in names, f"{TEMPLATE} missing from the wheel")
    stray = sorted(n for n in names if not n.startswith((f"{PACKAGE}/", f"{info}/")))
    check(not stray, f"files outside the package in the wheel: {stray}")
    ok(f"wheel holds all {len(want)} package files (incl. {TEMPLATE}), nothing else")

    headers = [line.partition(": ") for line in metadata.split("\n\n")[0].splitlines()]
    fields: dict[str, list[str]] = {}
    for key, _, value in headers:
        fields.setdefault(key, []).append(value)
    check(fields.get("Version") == [version], f"METADATA Version {fields['Version']}")
    check(
        f"vllm=={tested_vllm}" in fields.get("Requires-Dist", []),
        f"Requires-Dist lacks vllm=={tested_vllm}: {fields.get('Requires-Dist')}",
    )
    check(fields.get("License-Expression") == ["Apache-2.0"], "License-Expression")
    ok(f"METADATA: Version {version}, Requires-Dist vllm=={tested_vllm}")

    section, seen = None, set()
    for line in entry_points.splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line.strip("[]")
        elif "=" in line:
            name, _, value = (s.strip() for s in line.partition("="))
            seen.add((section, name, value))
    want_eps = {(ENTRY_GROUP, *ENTRY)} | {
        ("console_scripts", n, v) for n, v in SCRIPTS.items()
    }
    check(want_eps <= seen, f"entry points missing: {sorted(want_eps - seen)}")
    ok("entry_points.txt: vllm.general_plugins spark2_5 and both console scripts")

    with tarfile.open(sdist) as tf:
        members = {m.name.split("/", 1)[1] for m in tf.getmembers() if "/" in m.name}
    sdist_missing = sorted(f"src/{f}" for f in want if f"src/{f}" not in members)
    check(not sdist_missing, f"package files missing from the sdist: {sdist_missing}")
    for f in ("pyproject.toml", "README.md", "LICENSE", "NOTICE", "CHANGELOG.md"):
        check(f in members, f"{f} missing from the sdist")
    ok("sdist holds the package, README, LICENSE, NOTICE, CHANGELOG.md")
    print(f"WHEEL={wheel}")
    print(f"VERSION={version}")


def site_packages(python: str) -> Path:
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    out = subprocess.run([python, "-I", "-c", code], capture_output=True, text=True)
    check(out.returncode == 0, f"{python}: {out.stderr}")
    return Path(out.stdout.strip())


def step_fresh_env(venv: str, fresh: str, root: str) -> None:
    import venv as venv_module

    src_site = site_packages(f"{venv}/bin/python")
    # The base interpreter of VENV (this process runs VENV's python), no pip:
    # pip is borrowed with everything else.
    venv_module.create(fresh, with_pip=False, symlinks=True, clear=True)
    site = site_packages(f"{fresh}/bin/python")
    linked, skipped = 0, []
    for entry in sorted(src_site.iterdir()):
        name = entry.name
        if name == "__pycache__":
            continue
        if is_ours(name) or (
            name.endswith(".pth")
            and str(Path(root).resolve()) in entry.read_text(errors="replace")
        ):
            skipped.append(name)
            continue
        (site / name).symlink_to(entry)
        linked += 1
    print(
        f"fresh environment {fresh}: {linked} entries of {src_site} linked; "
        f"left out (the source tree's install): {skipped or 'nothing'}"
    )


# -- steps run by the fresh environment's interpreter -------------------------


def fresh_site() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def check_no_source_tree(root: str) -> None:
    leaks = [p for p in sys.path if p and under(p, root)]
    check(not leaks, f"the source tree is on sys.path: {leaks}")
    check(not under(os.getcwd(), root), f"running inside the source tree {os.getcwd()}")


def check_from_wheel(module_names, site: Path) -> None:
    for name in sorted(module_names):
        file = getattr(sys.modules[name], "__file__", None)
        check(
            file is not None and under(file, site) and not Path(file).is_symlink(),
            f"{name} imported from {file}, not from the installed wheel in {site}",
        )


def step_installed(root: str, tree: str, version: str) -> None:
    import importlib
    import importlib.metadata as md
    import importlib.resources as resources
    import pkgutil

    site = fresh_site()
    check(under(site, sys.prefix), f"site-packages {site} outside {sys.prefix}")
    check_no_source_tree(root)
    ok(f"python {sys.executable}; cwd {os.getcwd()}; no sys.path entry in {root}")

    import vllm_spark2_5_plugin as plugin

    check(
        Path(plugin.__file__).parent == site / PACKAGE,
        f"{PACKAGE}.__file__ is {plugin.__file__}, not under {site}",
    )
    ok(f"{PACKAGE}.__file__ = {plugin.__file__}")

    dists = [
        d
        for d in md.distributions()
        if normalized(d.metadata["Name"]) == normalized(DIST_NAME)
    ]
    check(len(dists) == 1, f"{len(dists)} installed {DIST_NAME} distributions")
    dist = dists[0]
    direct_url = json.loads(dist.read_text("direct_url.json") or "{}")
    check(
        under(dist.locate_file(""), site)
        and "dir_info" not in direct_url
        and direct_url.get("url", ".whl").endswith(".whl"),
        f"{DIST_NAME} metadata is not the wheel's install in {site}: {direct_url}",
    )
    check(
        plugin.__version__ == dist.version == version,
        f"__version__ {plugin.__version__}, installed {dist.version}, wheel {version}",
    )
    ok(f"one {DIST_NAME} installed (from the wheel), version {version} == __version__")

    eps = [ep for ep in md.entry_points(group=ENTRY_GROUP) if ep.name == ENTRY[0]]
    check(len(eps) == 1, f"{len(eps)} '{ENTRY[0]}' entry points in {ENTRY_GROUP}")
    check(eps[0].value == ENTRY[1], f"entry point value {eps[0].value}")
    check(eps[0].dist.version == version, "entry point from another distribution")
    check(eps[0].load() is plugin.register, "entry point does not load register")
    ok(f"entry point {ENTRY_GROUP}: {ENTRY[0]} = {ENTRY[1]}")

    scripts = {
        ep.name: ep.value
        for ep in md.entry_points(group="console_scripts")
        if ep.name in SCRIPTS
    }
    check(scripts == SCRIPTS, f"console scripts {scripts}")
    for name in SCRIPTS:
        script = Path(sys.prefix, "bin", name)
        check(script.is_file(), f"{script} not installed")
        check(
            script.read_text().startswith(f"#!{sys.prefix}/bin/python"),
            f"{script} does not run this environment's python",
        )
    ok(f"console scripts in {sys.prefix}/bin: {', '.join(SCRIPTS)}")

    template = resources.files(PACKAGE).joinpath(TEMPLATE)
    check(template.is_file(), f"{TEMPLATE} is not in the installed package")
    source = Path(tree, "src", PACKAGE, TEMPLATE).read_bytes()
    check(template.read_bytes() == source, f"installed {TEMPLATE} differs")
    ok(f"package data: {TEMPLATE} ({len(source)} bytes) installed")

    t0 = time.monotonic()
    found = sorted(
        m.name for m in pkgutil.walk_packages(plugin.__path__, f"{PACKAGE}.")
    )
    subpackages = {m.split(".")[1] for m in found if m.count(".") == 1}
    missing = sorted(set(SUBPACKAGES) - subpackages)
    check(not missing, f"subpackages missing from the install: {missing}")
    for name in found:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - report which module broke
            fail(f"import {name}: {exc!r}")
    ours = [m for m in sys.modules if m == PACKAGE or m.startswith(f"{PACKAGE}.")]
    check_from_wheel(ours, site)
    ok(
        f"all {len(found)} modules import ({', '.join(SUBPACKAGES)} and the "
        f"top-level ones), all from the wheel ({time.monotonic() - t0:.1f} s)"
    )

    import vllm

    check(
        Path(vllm.__file__).parent == site / "vllm",
        f"vllm from {vllm.__file__}",
    )
    check(vllm.__version__.startswith(plugin.TESTED_VLLM), f"vLLM {vllm.__version__}")
    ok(f"vLLM {vllm.__version__} borrowed through {site / 'vllm'}")


def step_checkpoint(ckpt: str) -> None:
    path = Path(ckpt)
    for name in (
        "config.json",
        "model.safetensors",
        "tokenizer_config.json",
        TEMPLATE,
        "generation_config.json",
    ):
        check((path / name).is_file(), f"the console script did not write {name}")
    config = json.loads((path / "config.json").read_text())
    check(config.get("architectures") == [TARGET_ARCH], f"architectures {config}")
    ok(
        f"spark2_5-make-tiny-checkpoint wrote {len(list(path.iterdir()))} files "
        f"to {path}"
    )


def step_generate(root: str, ckpt: str) -> None:
    check_no_source_tree(root)
    check(PACKAGE not in sys.modules, "plugin imported before vLLM started")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ["VLLM_CPU_KVCACHE_SPACE"] = "1"
    os.environ.pop("VLLM_PLUGINS", None)  # default: load every general plugin

    from vllm import LLM, SamplingParams

    t0 = time.monotonic()
    llm = LLM(ckpt, dtype="float32", enforce_eager=True, max_model_len=256, seed=0)
    params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
    out = llm.generate(["The weather in Paris is"], params, use_tqdm=False)[0]
    chat = llm.chat([{"role": "user", "content": "Hi"}], params, use_tqdm=False)[0]
    seconds = time.monotonic() - t0

    arch = llm.llm_engine.model_config.architecture
    check(arch == TARGET_ARCH, f"vLLM resolved {arch}")
    for what, result in (("generate", out), ("chat", chat)):
        n = len(result.outputs[0].token_ids)
        check(n == 8, f"{what}() gave {n} tokens, want 8")
    plugin = sys.modules.get(PACKAGE)
    check(plugin is not None and plugin._registered, "vLLM did not run register()")
    ours = [m for m in sys.modules if m == PACKAGE or m.startswith(f"{PACKAGE}.")]
    check(f"{PACKAGE}.models.spark2_5" in ours, "model module not loaded")
    check_from_wheel(ours, fresh_site())
    ok(
        f"vLLM loaded the plugin through its entry point and ran {arch} from the "
        f"wheel: generate() {out.outputs[0].token_ids}, chat() 8 tokens "
        f"({seconds:.1f} s)"
    )


STEPS = {
    "tree": step_tree,
    "artifacts": step_artifacts,
    "fresh-env": step_fresh_env,
    "installed": step_installed,
    "checkpoint": step_checkpoint,
    "generate": step_generate,
}

if __name__ == "__main__":
    STEPS[sys.argv[1]](*sys.argv[2:])
