//! The crate's layers point one way (docs/design.md §10): a module may use
//! only the modules below it. This test reads the sources and fails when a module names
//! one above it, when two modules name each other in a circle, or when the product names
//! the test-only modules.
//!
//! The `redquorum` command (`cli/`, the workspace's crate `redquorum-cli`) stands beside
//! the layers: it may use the library's public API (`redquorum::…`) and nothing else of
//! it, and the library must never use it. Its files are checked on their own.
//!
//! The sources are parsed as Rust (`syn`), so comments and strings never hide or fake a
//! path, and every `use` tree, path and macro body is read however it is laid out. Paths
//! are resolved as the compiler does: `crate::`, `super::` and `self::` against the
//! file's module (`src/x.rs` and `src/x/mod.rs` are `x`, `src/x/y.rs` is `x::y`), and a
//! name the crate root re-exports (`crate::Redlock`) to the module that defines it.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::{self, Visit};

/// Top to bottom. A module may use modules of lower rows only, except that the leaves
/// (the last row) may use each other, as long as no circle forms.
const LAYERS: &[&[&str]] = &[
    &["lib", "bench_internals"],
    // The lock kinds' facades, and the operators' calls beside them (`ops`), siblings on
    // one row: none may use another.
    &["lock", "many", "semaphore", "rwlock", "ops"],
    // The client handle the facades share: `Redlock`, `Builder::build`.
    &["client"],
    // The acquire engine under every facade: plan, target, attempt, wait, queue.
    &["engine"],
    &["lease"],
    &["core"],
    &["quorum", "guard", "wait"],
    &["master"],
    &["config"],
    &[
        "error",
        "backoff",
        "deadline",
        "tally",
        "scripts",
        "quarantine",
        "fencing",
        "mutants",
        "op",
        "cluster",
        "telemetry",
        "handed",
        "held",
        "postgres",
    ],
];

/// Beside the layers: they may use the product, the product must not use them.
const BESIDE: &[&str] = &["sim"];

/// The folder of the command's sources, relative to `src`: a crate of its own, beside the
/// layers.
const BIN: &str = "../cli/src";

fn rank(module: &str) -> Option<usize> {
    LAYERS.iter().position(|row| row.contains(&module))
}

/// The layer module a source file belongs to, from its path under `src`: `lib.rs` is
/// `lib`, `x.rs` and `x/**` are `x`, except the pure tally, which is a leaf of its own
/// inside the round's folder. Inline modules (`mod tests { .. }`) keep their file's.
fn module_of(rel: &Path) -> String {
    if rel == Path::new("quorum/tally.rs") {
        return "tally".to_owned();
    }
    let first = rel
        .components()
        .next()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .unwrap_or_default();
    first.trim_end_matches(".rs").to_owned()
}

/// The Rust module path of a source file under `src`, which `crate::`, `super::` and
/// `self::` are resolved against: `lib.rs` is the crate root, `x.rs` and `x/mod.rs` are
/// `x`, `x/y.rs` is `x::y`.
fn module_path(rel: &Path) -> Vec<String> {
    let mut path: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let file = path.pop().unwrap_or_default();
    match file.as_str() {
        "mod.rs" => {}
        "lib.rs" if path.is_empty() => {}
        _ => path.push(file.trim_end_matches(".rs").to_owned()),
    }
    path
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn parse(name: &str, source: &str) -> syn::File {
    syn::parse_file(source).unwrap_or_else(|e| panic!("parsing {name}: {e}"))
}

/// The child modules declared among `items` (`mod x;` and `mod x { .. }`): a path may
/// start with their names without `self::`.
fn child_modules(items: &[syn::Item]) -> BTreeSet<String> {
    items
        .iter()
        .filter_map(|item| match item {
            syn::Item::Mod(m) => Some(m.ident.to_string()),
            _ => None,
        })
        .collect()
}

/// Every leaf of a `use` tree under `prefix`: the full path it imports, and the name it
/// binds (`None` for a glob).
fn use_leaves(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<UseLeaf>) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            use_leaves(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) if n.ident == "self" => out.push(UseLeaf {
            path: prefix.clone(),
            binds: prefix.last().cloned(),
        }),
        syn::UseTree::Name(n) => {
            let mut path = prefix.clone();
            path.push(n.ident.to_string());
            out.push(UseLeaf {
                binds: Some(n.ident.to_string()),
                path,
            });
        }
        syn::UseTree::Rename(r) => {
            let mut path = prefix.clone();
            if r.ident != "self" {
                path.push(r.ident.to_string());
            }
            out.push(UseLeaf {
                path,
                binds: Some(r.rename.to_string()),
            });
        }
        syn::UseTree::Glob(_) => out.push(UseLeaf {
            path: prefix.clone(),
            binds: None,
        }),
        syn::UseTree::Group(g) => {
            for tree in &g.items {
                use_leaves(tree, prefix, out);
            }
        }
    }
}

/// One leaf of a `use` tree.
struct UseLeaf {
    /// The path as written, from the tree's first segment.
    path: Vec<String>,
    /// The name it binds; `None` for a glob.
    binds: Option<String>,
}

/// A path as written, made absolute (from the crate root) when it names something of
/// ours: it starts with `crate`, `super` or `self`, or with a child module declared in
/// `module` (`children`). `None` for other crates' paths, the prelude, locals and
/// `self` the receiver.
fn absolute(
    written: &[String],
    module: &[String],
    children: &BTreeSet<String>,
) -> Option<Vec<String>> {
    let (first, rest) = written.split_first()?;
    let mut path = match first.as_str() {
        "crate" => Vec::new(),
        "self" if rest.is_empty() => return None, // the receiver, not a module
        "self" => module.to_vec(),
        "super" => {
            let mut up = module.to_vec();
            up.pop()?;
            up
        }
        name if children.contains(name) => {
            let mut path = module.to_vec();
            path.push(name.to_owned());
            path
        }
        _ => return None,
    };
    let mut rest = rest;
    while let Some(("super", more)) = rest.split_first().map(|(s, m)| (s.as_str(), m)) {
        path.pop()?;
        rest = more;
    }
    path.extend(rest.iter().cloned());
    Some(path)
}

/// What the crate root (`src/lib.rs`) declares, to place paths that start at it.
struct Root {
    /// Its file modules (`mod x;`): the crate's top-level modules.
    modules: BTreeSet<String>,
    /// The names it re-exports (`pub use x::{A, B}`), each with the absolute path of what
    /// it re-exports (`x::A`).
    reexports: BTreeMap<String, Vec<String>>,
    /// Globs it re-exports (`pub use x::*`): the names they bring cannot be placed.
    globs: Vec<Vec<String>>,
    /// The items it defines itself (inline modules among them): they belong to `lib`.
    own: BTreeSet<String>,
}

impl Root {
    fn read(source: &str) -> Root {
        let file = parse("src/lib.rs", source);
        let children = child_modules(&file.items);
        let mut root = Root {
            modules: BTreeSet::new(),
            reexports: BTreeMap::new(),
            globs: Vec::new(),
            own: BTreeSet::new(),
        };
        for item in &file.items {
            match item {
                syn::Item::Mod(m) if m.content.is_none() => {
                    root.modules.insert(m.ident.to_string());
                }
                syn::Item::Use(u) => {
                    let mut leaves = Vec::new();
                    use_leaves(&u.tree, &mut Vec::new(), &mut leaves);
                    for leaf in leaves {
                        let Some(path) = absolute(&leaf.path, &[], &children) else {
                            continue; // another crate's item
                        };
                        match leaf.binds {
                            Some(name) => {
                                root.reexports.insert(name, path);
                            }
                            None => root.globs.push(path),
                        }
                    }
                }
                other => {
                    if let Some(name) = item_name(other) {
                        root.own.insert(name);
                    }
                }
            }
        }
        root
    }

    /// The layer module an absolute path lands in: `Err` with the crate-root name when
    /// it cannot be placed.
    fn place(&self, path: &[String]) -> Result<String, String> {
        self.place_within(path, 0)
    }

    fn place_within(&self, path: &[String], depth: usize) -> Result<String, String> {
        let Some(first) = path.first() else {
            return Ok("lib".to_owned()); // the crate root itself (`use super::*` at the top)
        };
        if self.modules.contains(first) {
            if first == "quorum" && path.get(1).is_some_and(|s| s == "tally") {
                return Ok("tally".to_owned());
            }
            return Ok(first.clone());
        }
        if let Some(source) = self.reexports.get(first)
            && depth < 8
        {
            return self.place_within(source, depth + 1);
        }
        if self.own.contains(first) {
            return Ok("lib".to_owned());
        }
        Err(first.clone())
    }
}

/// The name an item defines in its module, if it is one a path can name.
fn item_name(item: &syn::Item) -> Option<String> {
    let ident = match item {
        syn::Item::Const(i) => &i.ident,
        syn::Item::Enum(i) => &i.ident,
        syn::Item::Fn(i) => &i.sig.ident,
        syn::Item::Macro(i) => i.ident.as_ref()?,
        syn::Item::Mod(i) => &i.ident,
        syn::Item::Static(i) => &i.ident,
        syn::Item::Struct(i) => &i.ident,
        syn::Item::Trait(i) => &i.ident,
        syn::Item::TraitAlias(i) => &i.ident,
        syn::Item::Type(i) => &i.ident,
        syn::Item::Union(i) => &i.ident,
        _ => return None,
    };
    Some(ident.to_string())
}

/// What one source file names: the layer modules its paths land in, and the crate-root
/// names that could not be placed.
#[derive(Debug, Default)]
struct Named {
    modules: BTreeSet<String>,
    unplaced: BTreeSet<String>,
}

/// Visits every `use` tree, path and macro body of one file.
struct Reader<'r> {
    root: &'r Root,
    /// The Rust module being read: the file's, then inline modules' inside it.
    module: Vec<String>,
    /// The child modules declared in each enclosing module, innermost last.
    children: Vec<BTreeSet<String>>,
    named: Named,
}

impl Reader<'_> {
    fn note(&mut self, written: &[String]) {
        let children = self.children.last().cloned().unwrap_or_default();
        let Some(path) = absolute(written, &self.module, &children) else {
            return;
        };
        match self.root.place(&path) {
            Ok(module) => self.named.modules.insert(module),
            Err(name) => self.named.unplaced.insert(name),
        };
    }

    /// The paths inside a macro's tokens (`format!`, `tracing::debug!`, `vec!` ..), which
    /// the parser leaves unparsed: `a::b::c` runs of identifiers, `$crate` as `crate`.
    fn scan(&mut self, cursor: syn::buffer::Cursor<'_>) {
        let mut runs: Vec<Vec<String>> = Vec::new();
        let mut run: Vec<String> = Vec::new();
        let mut after_colons = false;
        let mut cursor = cursor;
        while !cursor.eof() {
            if let Some((ident, next)) = cursor.ident() {
                if after_colons {
                    run.push(ident.to_string());
                } else {
                    runs.push(std::mem::take(&mut run));
                    run.push(ident.to_string());
                }
                after_colons = false;
                cursor = next;
                continue;
            }
            if let Some((first, next)) = cursor.punct()
                && first.as_char() == ':'
                && let Some((second, after)) = next.punct()
                && second.as_char() == ':'
            {
                after_colons = !run.is_empty();
                cursor = after;
                continue;
            }
            after_colons = false;
            runs.push(std::mem::take(&mut run));
            if let Some((inside, _, _, next)) = cursor.any_group() {
                self.scan(inside);
                cursor = next;
            } else if let Some((_, next)) = cursor.token_tree() {
                cursor = next;
            } else {
                break;
            }
        }
        runs.push(run);
        for run in runs.into_iter().filter(|r| r.len() > 1) {
            self.note(&run);
        }
    }
}

impl<'ast> Visit<'ast> for Reader<'_> {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        let Some((_, items)) = &m.content else {
            return; // a file module, read on its own
        };
        self.module.push(m.ident.to_string());
        self.children.push(child_modules(items));
        visit::visit_item_mod(self, m);
        self.children.pop();
        self.module.pop();
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let mut leaves = Vec::new();
        use_leaves(&u.tree, &mut Vec::new(), &mut leaves);
        for leaf in leaves {
            self.note(&leaf.path);
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let written: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        self.note(&written);
        visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        visit::visit_macro(self, mac);
        let tokens = syn::buffer::TokenBuffer::new2(mac.tokens.clone());
        self.scan(tokens.begin());
    }

    /// `pub(crate)`, `pub(super)`, `pub(in crate::x)`: who may see an item, not a use.
    fn visit_vis_restricted(&mut self, _: &'ast syn::VisRestricted) {}
}

/// What the source of the file at `rel` (under `src`) names.
fn named_in(rel: &Path, source: &str, root: &Root) -> Named {
    let file = parse(&format!("src/{}", rel.display()), source);
    let mut reader = Reader {
        root,
        module: module_path(rel),
        children: vec![child_modules(&file.items)],
        named: Named::default(),
    };
    reader.visit_file(&file);
    reader.named
}

/// The graph's edges from one file: the layer modules it names besides its own (and, for
/// the round, besides its tally).
fn edges(rel: &Path, named: &Named) -> (String, BTreeSet<String>) {
    let module = module_of(rel);
    let mut to = named.modules.clone();
    to.remove(&module);
    if module == "quorum" {
        to.remove("tally"); // the round owns its tally
    }
    (module, to)
}

/// Which modules each module names, from the sources under `src`, and the crate-root
/// names that could not be placed (each as a problem).
fn imports(src: &Path) -> (BTreeMap<String, BTreeSet<String>>, Vec<String>) {
    let read = |path: &Path| {
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
    };
    let root = Root::read(&read(&src.join("lib.rs")));
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut unplaced = Vec::new();
    for file in files {
        let rel = file.strip_prefix(src).unwrap_or(&file).to_owned();
        let named = named_in(&rel, &read(&file), &root);
        let (module, to) = edges(&rel, &named);
        unplaced.extend(unplaced_problems(&rel, &named, &root));
        graph.entry(module).or_default().extend(to);
    }
    (graph, unplaced)
}

fn unplaced_problems(rel: &Path, named: &Named, root: &Root) -> Vec<String> {
    named
        .unplaced
        .iter()
        .map(|name| {
            let globs = if root.globs.is_empty() {
                String::new()
            } else {
                format!(" (lib.rs re-exports globs: {:?})", root.globs)
            };
            format!(
                "src/{} names `crate::{name}`, which neither lib.rs nor a module of ours defines{globs}",
                rel.display()
            )
        })
        .collect()
}

/// The problems with `graph`: upward imports, imports of test-only modules, unknown
/// modules, and circles.
fn problems(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut found = Vec::new();
    let leaves = LAYERS.len() - 1;
    for (module, named) in graph {
        if BESIDE.contains(&module.as_str()) {
            continue;
        }
        let Some(own) = rank(module) else {
            found.push(format!(
                "src module `{module}` has no place in the layer order"
            ));
            continue;
        };
        for other in named {
            if BESIDE.contains(&other.as_str()) {
                found.push(format!("`{module}` uses the test-only module `{other}`"));
                continue;
            }
            let Some(theirs) = rank(other) else {
                continue; // a name that is no module of ours (a macro path, say)
            };
            let allowed = theirs > own || (theirs == own && own == leaves);
            if !allowed {
                found.push(format!(
                    "`{module}` uses `{other}`, which is not below it in the layer order"
                ));
            }
        }
    }
    // Circles, by depth-first search over the product modules.
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
        found: &mut Vec<String>,
    ) {
        if let Some(at) = path.iter().position(|p| p == node) {
            found.push(format!(
                "import circle: {} -> {node}",
                path[at..].join(" -> ")
            ));
            return;
        }
        if !done.insert(node.to_owned()) {
            return;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if graph.contains_key(next) && !BESIDE.contains(&next.as_str()) {
                visit(next, graph, path, done, found);
            }
        }
        path.pop();
    }
    let mut done = BTreeSet::new();
    for module in graph.keys() {
        if !BESIDE.contains(&module.as_str()) {
            visit(module, graph, &mut Vec::new(), &mut done, &mut found);
        }
    }
    found
}

#[test]
fn modules_use_only_the_layers_below_them() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let (graph, mut found) = imports(&src);
    assert!(graph.contains_key("lock") && graph.contains_key("core"));
    assert!(graph["lib"].contains("client") && graph["quorum"].contains("master"));
    for facade in ["lock", "many", "semaphore", "rwlock"] {
        assert!(
            graph[facade].contains("engine"),
            "{facade} is no facade of the engine"
        );
    }
    found.extend(problems(&graph));
    assert!(
        found.is_empty(),
        "layer order broken:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_check_fires_on_an_upward_import_and_a_circle() {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut add = |from: &str, to: &[&str]| {
        graph
            .entry(from.to_owned())
            .or_default()
            .extend(to.iter().map(|t| (*t).to_owned()));
    };
    add("config", &["lock"]); // the circle the crate once had
    add("lock", &["config"]);
    add("master", &["sim"]);
    add("error", &["deadline"]); // leaves may use each other
    let found = problems(&graph);
    assert!(
        found.iter().any(|f| f.contains("`config` uses `lock`")),
        "{found:?}"
    );
    assert!(
        found.iter().any(|f| f.contains("import circle")),
        "{found:?}"
    );
    assert!(
        found.iter().any(|f| f.contains("test-only module `sim`")),
        "{found:?}"
    );
    assert!(
        !found.iter().any(|f| f.contains("`error` uses")),
        "{found:?}"
    );
}

/// The problems the check finds when `source` is the only file at `rel` (under `src`),
/// with the real crate root's modules and re-exports.
fn problems_in(rel: &str, source: &str) -> Vec<String> {
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs");
    let root = Root::read(&std::fs::read_to_string(&lib).unwrap());
    let named = named_in(Path::new(rel), source, &root);
    let (module, to) = edges(Path::new(rel), &named);
    let mut found = unplaced_problems(Path::new(rel), &named, &root);
    found.extend(problems(&[(module, to)].into()));
    found
}

fn assert_fires(rel: &str, source: &str, want: &str) {
    let found = problems_in(rel, source);
    assert!(
        found.iter().any(|f| f.contains(want)),
        "src/{rel} with {source:?}: want a problem with {want:?}, found {found:?}"
    );
}

#[test]
fn every_way_of_naming_an_upper_module_is_caught() {
    // In a top-level file `super::` is the crate root.
    assert_fires(
        "master.rs",
        "use super::lock::Redlock;\n",
        "`master` uses `lock`",
    );
    // From the tally, `super::` is the round.
    assert_fires(
        "quorum/tally.rs",
        "use super::run;\n",
        "`tally` uses `quorum`",
    );
    assert_fires(
        "quorum/tally.rs",
        "fn f() { super::super::core::g(); }\n",
        "`tally` uses `core`",
    );
    // rustfmt's layout of a long group.
    assert_fires(
        "master.rs",
        "use crate::{\n    error::Error,\n    lock::{\n        Redlock,\n    },\n};\n",
        "`master` uses `lock`",
    );
    // A type the crate root re-exports, by its root name.
    assert_fires(
        "master.rs",
        "use crate::Redlock;\n",
        "`master` uses `client`",
    );
    assert_fires(
        "deadline.rs",
        "fn f(_: &crate::LeaseHandle) {}\n",
        "`deadline` uses `lease`",
    );
    // `//` inside a string is no comment.
    assert_fires(
        "master.rs",
        "fn f() { let _ = \"redis://\"; crate::lock::x(); }\n",
        "`master` uses `lock`",
    );
    // Paths inside macro bodies, and in types and `mod tests` blocks.
    assert_fires(
        "master.rs",
        "fn f() { tracing::debug!(\"{:?}\", crate::core::g()); }\n",
        "`master` uses `core`",
    );
    assert_fires(
        "config.rs",
        "#[cfg(test)]\nmod tests {\n    use super::super::lease::Lease;\n}\n",
        "`config` uses `lease`",
    );
    assert_fires(
        "error.rs",
        "struct S(Vec<self::super::guard::G>);\n",
        "`error` uses `guard`",
    );
    // The crate root itself, and the test-only modules.
    assert_fires("master.rs", "use super::*;\n", "`master` uses `lib`");
    assert_fires(
        "quorum/mod.rs",
        "use crate::sim::World;\n",
        "test-only module `sim`",
    );
    // A crate-root name the check cannot place fails rather than passing unseen.
    assert_fires(
        "master.rs",
        "use crate::Nowhere;\n",
        "names `crate::Nowhere`",
    );
}

#[test]
fn comments_strings_visibility_and_own_submodules_are_no_uses() {
    for (rel, source) in [
        (
            "master.rs",
            "// crate::lock::x\nconst S: &str = \"crate::lock::x\";\n",
        ),
        (
            "master.rs",
            "/// [`Redlock`](crate::Redlock)\npub(crate) fn f() {}\n",
        ),
        (
            "quorum/tally.rs",
            "pub(super) fn count() {}\npub(in crate::quorum) fn g() {}\n",
        ),
        (
            "quorum/tally.rs",
            "#[cfg(test)]\nmod tests {\n    use super::*;\n}\n",
        ),
        (
            "quorum/mod.rs",
            "mod tally;\nuse self::tally::count;\nfn f() { tally::g(); }\n",
        ),
        (
            "quorum/tests.rs",
            "use super::*;\nuse crate::master::Master;\n",
        ),
        (
            "lease/watchdog.rs",
            "use super::{LeaseShared, LostReason};\n",
        ),
        (
            "lock.rs",
            "use crate::{Error, core::Inner, lease::Lease};\nimpl S {\n    fn f(&self) {\n        self.g();\n    }\n}\n",
        ),
        ("sim/mod.rs", "use crate::Redlock;\n"),
        (
            "fencing.rs",
            "use crate::scripts::FENCE;\nfn f() -> crate::FencingToken { g!(crate::Error) }\n",
        ),
    ] {
        let found = problems_in(rel, source);
        assert!(found.is_empty(), "src/{rel} with {source:?}: {found:?}");
    }
}

#[test]
fn facades_use_nothing_of_each_other() {
    // The facades are siblings on one row: each stands on the engine, the lease and the
    // core, and a facade that names another's item, public or private, by any path, is
    // refused.
    let facades = ["lock", "many", "semaphore", "rwlock"];
    assert!(facades.iter().all(|f| rank(f) == rank("lock")));
    assert!(rank("lock") < rank("client") && rank("client") < rank("engine"));
    assert_fires(
        "semaphore.rs",
        "use crate::lock::Shape;\n",
        "`semaphore` uses `lock`",
    );
    assert_fires(
        "rwlock.rs",
        "fn f() { crate::semaphore::choose(); }\n",
        "`rwlock` uses `semaphore`",
    );
    assert_fires("many.rs", "use super::lock::hold;\n", "`many` uses `lock`");
    assert_fires("lock.rs", "use crate::RwLock;\n", "`lock` uses `rwlock`");
    // The engine under them knows none of them, nor the client handle.
    assert_fires(
        "engine/target.rs",
        "use crate::semaphore::Semaphore;\n",
        "`engine` uses `semaphore`",
    );
    assert_fires(
        "engine/mod.rs",
        "use crate::Redlock;\n",
        "`engine` uses `client`",
    );
    // What they share is below them.
    for (rel, source) in [
        ("semaphore.rs", "use crate::engine::{SlotSet, Target};\n"),
        (
            "many.rs",
            "use crate::{client::Redlock, engine::Plan, lease::Lease};\n",
        ),
    ] {
        let found = problems_in(rel, source);
        assert!(found.is_empty(), "src/{rel} with {source:?}: {found:?}");
    }
}

#[test]
fn the_operators_calls_are_used_by_nothing_but_the_root() {
    // `ops` (inspect, force-unlocks, init_cluster, check_masters) is a wing of its own:
    // the crate root re-exports it, and no lock, facade, client handle or engine code
    // reaches into it, so the engine can change without the operators' calls, and the
    // reverse. The test-only modules beside the layers (the simulation) may use it.
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let (graph, _) = imports(&src);
    assert!(graph.contains_key("ops"), "no module `ops` under src");
    assert!(
        graph["lib"].contains("ops"),
        "lib.rs re-exports nothing of `ops`"
    );
    let users: Vec<&String> = graph
        .iter()
        .filter(|(module, named)| {
            module.as_str() != "lib" && !BESIDE.contains(&module.as_str()) && named.contains("ops")
        })
        .map(|(module, _)| module)
        .collect();
    assert!(users.is_empty(), "modules that use `ops`: {users:?}");
    // The check refuses it however it is named: a module path, a re-exported type.
    assert_fires(
        "engine/mod.rs",
        "use crate::ops::HealthReport;\n",
        "`engine` uses `ops`",
    );
    assert_fires(
        "engine/attempt.rs",
        "fn f(_: &crate::Inspection) {}\n",
        "`engine` uses `ops`",
    );
    assert_fires(
        "client.rs",
        "use crate::HealthReport;\n",
        "`client` uses `ops`",
    );
    assert_fires("lock.rs", "use crate::UnlockReport;\n", "`lock` uses `ops`");
    // Nor does it use a facade: it stands on the client handle, the core and the masters.
    assert_fires(
        "ops/inspect.rs",
        "use crate::RwLock;\n",
        "`ops` uses `rwlock`",
    );
    for (rel, source) in [
        (
            "ops/unlock.rs",
            "use crate::{client::Redlock, core::Inner, master::Op};\n",
        ),
        (
            "ops/health/tests.rs",
            "use super::*;\nuse crate::ops::report::Finding;\n",
        ),
    ] {
        let found = problems_in(rel, source);
        assert!(found.is_empty(), "src/{rel} with {source:?}: {found:?}");
    }
}

/// The `#[path = "…"]` attributes of the `mod` items in `file`, at any depth.
fn path_attributes(file: &syn::File) -> Vec<String> {
    struct Paths(Vec<String>);
    impl<'ast> Visit<'ast> for Paths {
        fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
            for attr in &m.attrs {
                if attr.path().is_ident("path")
                    && let syn::Meta::NameValue(nv) = &attr.meta
                    && let syn::Expr::Lit(syn::ExprLit {
                        lit: syn::Lit::Str(s),
                        ..
                    }) = &nv.value
                {
                    self.0.push(s.value());
                }
            }
            visit::visit_item_mod(self, m);
        }
    }
    let mut paths = Paths(Vec::new());
    paths.visit_file(file);
    paths.0
}

/// The problems with the command's sources (under [`BIN`], relative to `src`): a `#[path]` module
/// that pulls in a library source file (the command must go through the public API), and
/// a library file that pulls in the command's.
fn command_problems(files: &[(PathBuf, String)]) -> Vec<String> {
    let mut found = Vec::new();
    for (rel, source) in files {
        let in_bin = rel.starts_with(BIN);
        for path in path_attributes(&parse(&rel.display().to_string(), source)) {
            if in_bin {
                found.push(format!(
                    "src/{} includes {path:?} by path: the command uses the library only as `redquorum::…`",
                    rel.display()
                ));
            } else if path.contains(BIN) {
                found.push(format!(
                    "src/{} includes {path:?}: the library must not use the command",
                    rel.display()
                ));
            }
        }
    }
    found
}

#[test]
fn the_command_stands_beside_the_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    rust_files(&src.join(BIN), &mut paths);
    let files: Vec<(PathBuf, String)> = paths
        .iter()
        .map(|p| {
            let rel = match p.strip_prefix(src.join(BIN)) {
                Ok(command) => Path::new(BIN).join(command),
                Err(_) => p.strip_prefix(&src).unwrap().to_owned(),
            };
            (rel, std::fs::read_to_string(p).unwrap())
        })
        .collect();
    // The command exists and uses the public crate.
    assert!(
        files
            .iter()
            .any(|(rel, source)| rel.starts_with(BIN) && source.contains("use redquorum::")),
        "no source under src/{BIN} uses `redquorum::`"
    );
    let found = command_problems(&files);
    assert!(found.is_empty(), "{}", found.join("\n"));

    // The check fires both ways.
    let planted = [
        (
            PathBuf::from("../cli/src/main.rs"),
            "#[path = \"../../src/lock.rs\"]\nmod lock;\n".to_owned(),
        ),
        (
            PathBuf::from("lock.rs"),
            "#[path = \"../cli/src/run.rs\"]\nmod run;\n".to_owned(),
        ),
    ];
    let found = command_problems(&planted);
    assert!(
        found.iter().any(|f| f.contains("only as `redquorum::")),
        "{found:?}"
    );
    assert!(
        found.iter().any(|f| f.contains("must not use the command")),
        "{found:?}"
    );
}

/// The testkit is a crate of its own that uses nothing of the library: its manifest names
/// no dependency on it (so no `use redquorum` can compile there).
#[test]
fn the_testkit_depends_on_nothing_of_the_library() {
    let manifest =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/testkit/Cargo.toml"))
            .unwrap();
    let named: Vec<&str> = manifest
        .lines()
        .filter(|line| {
            let name = line.split(['=', ' ', '.']).next().unwrap_or("");
            name == "redquorum"
        })
        .collect();
    assert!(
        named.is_empty(),
        "testkit/Cargo.toml depends on the library: {named:?}"
    );
}

/// Whether `attrs` hold `#[cfg(redquorum_mutants)]`: the item exists only where the
/// planted bugs are compiled.
fn planted_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        attr.path().is_ident("cfg")
            && attr
                .parse_args::<syn::Ident>()
                .is_ok_and(|cfg| cfg == "redquorum_mutants")
    })
}

/// The struct fields and function parameters of a product file that exist only with the
/// planted bugs compiled, as `file: name`.
#[derive(Default)]
struct PlantedFields {
    file: String,
    found: Vec<String>,
}

impl<'ast> Visit<'ast> for PlantedFields {
    fn visit_field(&mut self, field: &'ast syn::Field) {
        if planted_only(&field.attrs) {
            let name = field
                .ident
                .as_ref()
                .map_or_else(|| "a tuple field".to_owned(), |i| format!("field `{i}`"));
            self.found.push(format!("{}: {name}", self.file));
        }
        visit::visit_field(self, field);
    }

    fn visit_fn_arg(&mut self, arg: &'ast syn::FnArg) {
        let attrs = match arg {
            syn::FnArg::Receiver(r) => &r.attrs,
            syn::FnArg::Typed(t) => &t.attrs,
        };
        if planted_only(attrs) {
            self.found.push(format!("{}: a parameter", self.file));
        }
        visit::visit_fn_arg(self, arg);
    }
}

/// The planted-bug fields and parameters in `source`, the file `file`.
fn planted_fields_in(file: &str, source: &str) -> Vec<String> {
    let mut visitor = PlantedFields {
        file: file.to_owned(),
        found: Vec::new(),
    };
    visitor.visit_file(&parse(file, source));
    visitor.found
}

/// No type or function of the product carries a planted bug: each place a bug changes
/// asks the registry of `src/mutants.rs` for the client's bug where it acts
/// (docs/design.md §10). The simulation (test-only) may do as it likes.
#[test]
fn no_product_type_carries_a_planted_bug() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut found = Vec::new();
    for path in files {
        let rel = path.strip_prefix(&src).unwrap();
        if rel.starts_with("sim") || rel == Path::new("mutants.rs") {
            continue;
        }
        let source = std::fs::read_to_string(&path).unwrap();
        found.extend(planted_fields_in(&rel.display().to_string(), &source));
    }
    assert!(
        found.is_empty(),
        "planted bugs carried by the product's types (plant them in the registry):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_planted_field_check_fires_on_a_field_and_a_parameter() {
    let source = "struct A { #[cfg(redquorum_mutants)] planted: u8, #[cfg(not(redquorum_mutants))] \
                  other: u8, #[cfg(test)] seen: u8 }\n\
                  struct B(#[cfg(redquorum_mutants)] u8);\n\
                  fn f(#[cfg(redquorum_mutants)] planted: u8) {}\n";
    assert_eq!(
        planted_fields_in("x.rs", source),
        [
            "x.rs: field `planted`",
            "x.rs: a tuple field",
            "x.rs: a parameter"
        ]
    );
}
