#!/usr/bin/env bash
# Static checks of the Spack delivery files (Spack itself is usually not installed in CI):
#   a. spack.yaml parses, names a package repository that exists, and asks for mpiformer;
#   b. the recipe compiles as Python (py_compile only: Spack's modules are not importable);
#   c. every CMake variable the recipe sets exists in the project (option, cache variable,
#      find_* result) or is a standard CMake variable, every variant it maps is declared, and every
#      project option() is decided by the recipe;
#   d. repo.yaml: namespace = directory name, Package API v2, package directory = class name;
#   e. `spack -e <root> concretize` when `spack` is on PATH (otherwise reported as not run);
#   f. modules: `module load mpiformer` needs no module Spack may not have written (Spack writes
#      none for externals such as glibc or a system MPI, and none for a dependency installed before
#      modules were on), so only the environment's roots get modules and they autoload nothing;
#      names carry at most one hash, mpiformer's none, and +cuda builds get their own name;
#   g. the recipe takes the cblas include directory from cblas.h's own path (Spack's
#      headers.directories reduces it to the `include` above it) and, as the modules load no MPI
#      module, puts the MPI's launcher on PATH itself (setup_run_environment);
#   h. .gitignore ignores the build-<platform>-<os>-<target>-<hash> link Spack leaves in a
#      develop checkout (a link to a directory: a pattern ending in / does not match it).
#   i. every documented way to load it works: `spack -e . load` only as eval "$(... --sh)", and
#      `spack load mpiformer` only after a `spack repo add` (else "Unknown namespace");
#   bash ci/check_spack.sh       (ctest: spack_static)
# Prints one line per check and `check_spack: N passed, N failed`; exits 1 if any failed.
set -u

root=$(cd "$(dirname "$0")/.." && pwd)
python=/usr/bin/python3
[ -x "$python" ] || python=$(command -v python3 || true)
if [ -z "$python" ]; then
  echo "check_spack: no python3"
  echo "check_spack: 0 passed, 1 failed"
  exit 1
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/mpf-spack.XXXXXX")
trap 'rm -rf "$work"' EXIT
cmake --help-variable-list >"$work/cmake-variables" 2>/dev/null || : >"$work/cmake-variables"

"$python" - "$root" "$work" <<'PYTHON'
import ast
import fnmatch
import os
import py_compile
import re
import subprocess
import sys

root, work = sys.argv[1], sys.argv[2]
results = []


def check(name, ok, detail=""):
    results.append(ok)
    print(("PASS  " if ok else "FAIL  ") + name + ("" if ok or not detail else f"\n      {detail}"))


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


# ---- a. spack.yaml ---------------------------------------------------------------------------
def load_yaml(text):
    """PyYAML when importable, else a parser for the subset spack.yaml uses (block mappings and
    lists of scalars), enough to find repos, specs and develop."""
    try:
        import yaml  # Debian: python3-yaml
        return yaml.safe_load(text), "PyYAML"
    except ImportError:
        pass
    lines = []
    for raw in text.splitlines():
        line = re.sub(r"\s+#.*$", "", raw) if not raw.lstrip().startswith("#") else ""
        if line.strip():
            lines.append((len(line) - len(line.lstrip()), line.strip()))

    def scalar(s):
        s = s.strip()
        return s[1:-1] if len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"" else s

    def parse(i, indent):
        if lines[i][1].startswith("- "):
            out = []
            while i < len(lines) and lines[i][0] == indent and lines[i][1].startswith("- "):
                out.append(scalar(lines[i][1][2:]))
                i += 1
            return out, i
        out = {}
        while i < len(lines) and lines[i][0] == indent:
            key, _, value = lines[i][1].partition(":")
            if not _:
                raise ValueError(f"not a mapping entry: {lines[i][1]!r}")
            i += 1
            if value.strip():
                out[scalar(key)] = scalar(value)
            elif i < len(lines) and lines[i][0] > indent:
                out[scalar(key)], i = parse(i, lines[i][0])
            elif i < len(lines) and lines[i][0] == indent and lines[i][1].startswith("- "):
                out[scalar(key)], i = parse(i, indent)
            else:
                out[scalar(key)] = None
        return out, i

    data, i = parse(0, lines[0][0]) if lines else ({}, 0)
    if i != len(lines):
        raise ValueError(f"unexpected indentation at {lines[i][1]!r}")
    return data, "built-in subset parser (python3-yaml not installed)"


env_file = os.path.join(root, "spack.yaml")
repo_dirs = []
try:
    env, parser = load_yaml(read(env_file))
    spack = env["spack"]
    check(f"spack.yaml parses ({parser})", isinstance(spack, dict))
except Exception as e:  # noqa: BLE001 - report any parse failure as a failed check
    check("spack.yaml parses", False, repr(e))
    spack = {}

repos = spack.get("repos")
if isinstance(repos, dict):  # Spack >= 1.0: name -> path (or a git description)
    paths = [v for v in repos.values() if isinstance(v, str)]
elif isinstance(repos, list):  # legacy list of paths
    paths = [v for v in repos if isinstance(v, str)]
else:
    paths = []
check("spack.yaml names a package repository (repos:)", bool(paths), f"repos = {repos!r}")
for p in paths:
    full = os.path.normpath(os.path.join(root, p.replace("$env", root)))
    ok = os.path.isfile(os.path.join(full, "repo.yaml"))
    check(f"repo path {p} exists and holds repo.yaml", ok, full)
    if ok:
        repo_dirs.append(full)
specs = [str(s) for s in (spack.get("specs") or [])]
check("spack.yaml asks for mpiformer", any(re.match(r"mpiformer\b", s) for s in specs), specs)
for name, dev in (spack.get("develop") or {}).items():
    path = os.path.normpath(os.path.join(root, (dev or {}).get("path", name)))
    check(f"develop path for {name} is the project", os.path.isfile(os.path.join(path, "CMakeLists.txt")), path)

# ---- d. repo.yaml ----------------------------------------------------------------------------
recipe = None
for repo in repo_dirs:
    try:
        meta = load_yaml(read(os.path.join(repo, "repo.yaml")))[0]["repo"]
    except Exception as e:  # noqa: BLE001
        check(f"{os.path.relpath(repo, root)}/repo.yaml parses", False, repr(e))
        continue
    ns = str(meta.get("namespace", ""))
    # API v2 layout: <anything>/spack_repo/<namespace, dots as directories>/repo.yaml
    expected = "spack_repo/" + ns.replace(".", "/")
    rel = os.path.relpath(repo, root)
    check(f"repo.yaml namespace '{ns}' matches its directory {rel}",
          bool(ns) and repo.replace(os.sep, "/").endswith("/" + expected), f"expected .../{expected}")
    api = str(meta.get("api", ""))
    check(f"repo.yaml declares Package API v2 (api: {api or 'missing'})", re.fullmatch(r"v2\.\d+", api) is not None)
    subdir = meta.get("subdirectory", "packages") or ""
    candidate = os.path.join(repo, subdir, "mpiformer", "package.py")
    check(f"{os.path.relpath(candidate, root)} exists", os.path.isfile(candidate))
    if os.path.isfile(candidate):
        recipe = candidate

# ---- b. the recipe compiles ------------------------------------------------------------------
tree = None
if recipe:
    rel = os.path.relpath(recipe, root)
    try:
        py_compile.compile(recipe, cfile=os.path.join(work, "package.pyc"), doraise=True)
        check(f"py_compile {rel}", True)
        tree = ast.parse(read(recipe))
    except py_compile.PyCompileError as e:
        check(f"py_compile {rel}", False, str(e))

# ---- c. the recipe's CMake variables and variants --------------------------------------------
if tree is not None:
    source = read(recipe)
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    cls = classes[0] if classes else None
    check("recipe class is Mpiformer (the package directory's name)", cls is not None and cls.name == "Mpiformer")
    bases = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "?") for b in (cls.bases if cls else [])]
    check("recipe derives from CMakePackage (and CudaPackage)", "CMakePackage" in bases and "CudaPackage" in bases, bases)
    check("recipe imports build systems the API v2 way",
          "from spack_repo.builtin.build_systems.cmake import" in source and "from spack.package import *" in source)

    defined, variants_used = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            fname = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            args = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if fname in ("define", "define_from_variant") and args:
                defined.add(args[0])
                if fname == "define_from_variant":
                    variants_used.add(args[1] if len(args) > 1 else args[0].lower())
            elif fname == "define_cuda_architectures":
                defined.add("CMAKE_CUDA_ARCHITECTURES")
            elif fname == "define_hip_architectures":
                defined.add("CMAKE_HIP_ARCHITECTURES")
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            defined.update(re.findall(r"-D([A-Za-z_][A-Za-z0-9_]*)(?::[A-Z]+)?=", node.value))

    cmake_text = read(os.path.join(root, "CMakeLists.txt"))
    cmake_dir = os.path.join(root, "cmake")
    if os.path.isdir(cmake_dir):
        for f in sorted(os.listdir(cmake_dir)):
            if f.endswith(".cmake"):
                cmake_text += "\n" + read(os.path.join(cmake_dir, f))
    cmake_code = "\n".join(line.split("#", 1)[0] for line in cmake_text.splitlines())
    project_vars = set(re.findall(r"\b(?:option|cmake_dependent_option)\s*\(\s*([A-Za-z_][A-Za-z0-9_]*)", cmake_code, re.I))
    project_vars |= set(re.findall(r"\bfind_(?:library|path|program|file)\s*\(\s*([A-Za-z_][A-Za-z0-9_]*)", cmake_code, re.I))
    project_vars |= set(re.findall(r"\bset\s*\(\s*([A-Za-z_][A-Za-z0-9_]*)[^)]*\bCACHE\b", cmake_code, re.I))
    options = set(re.findall(r"\boption\s*\(\s*([A-Za-z_][A-Za-z0-9_]*)", cmake_code, re.I))

    # Standard variables: CMake's own list (templates like CMAKE_<LANG>_COMPILER as patterns).
    std_patterns = []
    with open(os.path.join(work, "cmake-variables"), encoding="utf-8") as f:
        for v in f.read().split():
            std_patterns.append(re.compile("^" + re.sub(r"<[^>]+>", "[A-Za-z0-9_]+", re.escape(v).replace(r"\<", "<").replace(r"\>", ">")) + "$"))
    have_cmake_list = bool(std_patterns)

    def standard(name):
        if have_cmake_list:
            return any(p.match(name) for p in std_patterns)
        return name.startswith("CMAKE_")  # no cmake to ask: accept the CMAKE_ namespace

    check(f"recipe sets CMake variables ({', '.join(sorted(defined)) or 'none'})", bool(defined))
    for name in sorted(defined):
        if name in project_vars:
            check(f"-D{name}: declared in the project's CMake", True)
        elif standard(name):
            check(f"-D{name}: standard CMake variable" + ("" if have_cmake_list else " (CMAKE_ prefix; cmake not on PATH)"), True)
        else:
            check(f"-D{name}: exists in CMakeLists.txt or CMake", False,
                  "not an option()/cache variable/find_* result of the project nor a documented CMake variable")
    for opt in sorted(options):
        check(f"project option {opt} is set by the recipe", opt in defined)

    declared = set(re.findall(r"\bvariant\(\s*[\"']([A-Za-z0-9_]+)[\"']", source))
    if "CudaPackage" in bases:
        declared |= {"cuda", "cuda_arch"}
    for v in sorted(variants_used):
        check(f"variant '{v}' mapped by define_from_variant is declared", v in declared, sorted(declared))

# ---- f. modules: loadable in a new shell right after `spack -e . install` --------------------
def is_true(value):
    return str(value).strip().lower() == "true"


module_sets = (spack.get("modules") or {}) if isinstance(spack, dict) else {}
enabled_systems = []
for set_name, module_set in module_sets.items():
    if not isinstance(module_set, dict):
        continue
    for system in module_set.get("enable") or []:
        enabled_systems.append((set_name, str(system), module_set.get(str(system)) or {}))
check("spack.yaml enables modules (modules:<set>:enable)", bool(enabled_systems), module_sets)
for set_name, system, conf in enabled_systems:
    where = f"modules:{set_name}:{system}"
    check(f"{where}: exclude_implicits: true (no module, and no autoload, for dependencies)",
          is_true(conf.get("exclude_implicits")), f"exclude_implicits = {conf.get('exclude_implicits')!r}")
    autoloads = {key: (rules or {}).get("autoload") for key, rules in conf.items()
                 if isinstance(rules, dict) and "autoload" in rules}
    check(f"{where}: autoload none (a module autoloading an external's fails: Spack wrote none)",
          str((conf.get("all") or {}).get("autoload")) == "none"
          and all(str(v) == "none" for v in autoloads.values()), f"autoload settings: {autoloads}")
    hash_length = str(conf.get("hash_length", 7))
    check(f"{where}: hash_length 0 (Spack appends no hash to mpiformer's name)", hash_length == "0",
          f"hash_length = {hash_length}")
    projections = conf.get("projections") or {}
    hidden = is_true(conf.get("hide_implicits"))
    for key, projection in projections.items():
        hashes = len(re.findall(r"\{[^}]*hash[^}]*\}", str(projection)))
        # Spack adds one hash itself to hidden modules' names: a {hash} in the projection doubles it.
        limit = 0 if hidden or key.startswith("mpiformer") else 1
        check(f"{where}: projection {key}: '{projection}' holds {hashes} hash(es), at most {limit}"
              + (" (hide_implicits adds one)" if hidden and not key.startswith("mpiformer") else ""),
              hashes <= limit)
    own = {k: str(v) for k, v in projections.items() if k.startswith("mpiformer")}
    cuda = [v for k, v in own.items() if "+cuda" in k]
    plain = own.get("mpiformer", str(projections.get("all", "")))
    check(f"{where}: mpiformer+cuda gets its own module name", bool(cuda) and cuda[0] != plain,
          f"projections: {projections}")
    # The OpenMP settings belong to the recipe (g), where `spack load` gets them too: a second
    # copy in the module configuration could only disagree with it.
    env_set = (((conf.get("mpiformer") or {}).get("environment") or {}).get("set") or {})
    check(f"{where}: the module sets no OMP_* of its own (the recipe's run environment does)",
          not any(str(k).startswith("OMP_") for k in env_set), f"environment.set = {env_set}")

# ---- g. the recipe: cblas.h's directory, the MPI's launcher ----------------------------------
if tree is not None:
    directories_uses = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "directories"
                        and isinstance(n.value, ast.Attribute) and n.value.attr == "headers"]
    check("recipe does not take the cblas include directory from headers.directories",
          not directories_uses, f"headers.directories used on line(s) {directories_uses}")
    strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    dirname_calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                     and n.func.attr == "dirname"]
    check("recipe finds cblas.h itself and passes its directory (os.path.dirname)",
          "cblas.h" in strings and bool(dirname_calls) and "MPIFORMER_CBLAS_INCLUDE_DIR" in strings)
    run_env = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "setup_run_environment"]
    prepends = [n for f in run_env for n in ast.walk(f) if isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute) and n.func.attr == "prepend_path"
                and n.args and isinstance(n.args[0], ast.Constant) and n.args[0].value == "PATH"]
    check("recipe's setup_run_environment puts the MPI's bin/ on PATH (the module loads no MPI module)",
          bool(prepends))
    # Kokkos 4's OpenMP backend warns on every rank without OMP_PROC_BIND: the module and
    # `spack load` both set it, unbound (interactive mpiexec binds no ranks).
    sets = {n.args[0].value: n.args[1].value for f in run_env for n in ast.walk(f)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "set"
            and len(n.args) == 2 and all(isinstance(a, ast.Constant) for a in n.args)}
    check("recipe's run environment sets OMP_PROC_BIND=false and OMP_PLACES (module and spack load)",
          sets.get("OMP_PROC_BIND") == "false" and "OMP_PLACES" in sets, f"env.set: {sets}")

# ---- i. the documented ways to load it -------------------------------------------------------
# Under Spack's shell function `spack -e DIR load` (no --sh) fails ("requires Spack's shell
# support"), and `spack load mpiformer` fails ("Unknown namespace") unless `spack repo add`
# registered the recipe first. Every command line that loads mpiformer must be a form that works.
for doc in ("README.md", "docs/install.md", "spack.yaml", "spack_repo/mpiformer/packages/mpiformer/package.py"):
    path = os.path.join(root, doc)
    if not os.path.exists(path):
        continue
    text = read(path)
    bad = []
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        # Commands only: a Markdown code block's lines, a file header's indented usage lines.
        if doc.endswith(".md"):
            if line.lstrip().startswith("```"):
                fenced = not fenced
            if not fenced:
                continue
        elif not re.match(r"#\s{3}", line):
            continue
        for m in re.finditer(r"spack\s+(-e\s*\S+\s+)?load\b([^\n`#]*)", line):
            env_form, rest = m.group(1), m.group(2)
            if env_form and not re.search(r"--(sh|csh|fish)\b", rest):
                bad.append(f"{doc}:{number}: '{m.group(0).strip()}' needs --sh inside eval \"$(...)\"")
            elif not env_form and "spack repo add" not in text[:text.find(line)] + line \
                    and "repo add" not in line:
                bad.append(f"{doc}:{number}: '{m.group(0).strip()}' before any `spack repo add`")
    check(f"{doc}: every way to load mpiformer it gives works (eval with --sh, or after spack repo add)",
          not bad, "; ".join(bad))

# ---- h. .gitignore and the develop checkout's build-* link -----------------------------------
link = "build-linux-ubuntu24.04-zen3-abcdefg"
try:
    ignored = subprocess.run(["git", "-C", root, "check-ignore", "-q", "--no-index", link],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
    how = "git check-ignore"
except OSError:  # no git: anchored patterns without a trailing / (those match a link too)
    patterns = [ln.strip() for ln in read(os.path.join(root, ".gitignore")).splitlines()]
    ignored = any(fnmatch.fnmatchcase(link, p.lstrip("/")) for p in patterns
                  if p and not p.startswith(("#", "!")) and not p.endswith("/"))
    how = ".gitignore patterns (git not found)"
check(f".gitignore ignores Spack's develop link ({link}, a file to git; {how})", ignored)

with open(os.path.join(work, "counts"), "w") as f:
    f.write(f"{sum(results)} {len(results) - sum(results)}\n")
PYTHON
[ -f "$work/counts" ] || { echo "FAIL  static checks (the Python part stopped early)"; echo "0 1" >"$work/counts"; }
read -r passed failed <"$work/counts"

# ---- e. concretize, where Spack is installed ---------------------------------------------------
if command -v spack >/dev/null 2>&1; then
  if spack -e "$root" concretize >"$work/concretize.log" 2>&1; then
    echo "PASS  spack -e . concretize"
    passed=$((passed + 1))
  else
    echo "FAIL  spack -e . concretize"
    sed 's/^/      /' "$work/concretize.log" | tail -n 40
    failed=$((failed + 1))
  fi
else
  echo "SKIP  spack -e . concretize: not run (spack not on PATH)"
fi

echo "check_spack: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
