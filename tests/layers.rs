//! The crate's layers point one way (docs/design.md §10): a module may use
//! only the modules below it. This test reads the sources and fails when a module names
//! one above it, when two modules name each other in a circle, or when the product names
//! the test-only modules.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Top to bottom. A module may use modules of lower rows only, except that the leaves
/// (the last row) may use each other, as long as no circle forms.
const LAYERS: &[&[&str]] = &[
    &["lib", "bench_internals"],
    &["lock"],
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
    ],
];

/// Beside the layers: they may use the product, the product must not use them.
const BESIDE: &[&str] = &["testkit", "sim"];

fn rank(module: &str) -> Option<usize> {
    LAYERS.iter().position(|row| row.contains(&module))
}

/// The module a source file belongs to: `src/x.rs` and `src/x/**` are `x`, except the
/// pure tally, which is a leaf of its own inside the round's folder.
fn module_of(path: &Path, src: &Path) -> String {
    let rel = path.strip_prefix(src).unwrap_or(path);
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

/// Every `crate::<module>` a source names outside comments, and `super::` from the round's
/// tally (which would reach the round).
fn named_modules(source: &str) -> BTreeSet<String> {
    let mut named = BTreeSet::new();
    for line in source.lines() {
        let code = match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        };
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                named.insert(name);
            }
        }
        // `use crate::{a, b::c}`: the names inside a braced group.
        if let Some(at) = code.find("crate::{") {
            let group = &code[at + "crate::{".len()..];
            for part in group.split([',', '}']) {
                let name: String = part
                    .trim()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() && name != "self" {
                    named.insert(name);
                }
            }
        }
    }
    named
}

/// Which modules each module names, from the sources under `src`.
fn imports(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let module = module_of(&file, src);
        let source = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        let mut named = named_modules(&source);
        if module == "tally" {
            named.remove("tally");
        }
        if module == "quorum" {
            named.remove("tally"); // the round owns its tally
        }
        named.remove(&module);
        graph.entry(module).or_default().extend(named);
    }
    graph
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
    let graph = imports(&src);
    assert!(graph.contains_key("lock") && graph.contains_key("core"));
    let found = problems(&graph);
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

#[test]
fn names_inside_braces_and_paths_are_found_and_comments_ignored() {
    let named = named_modules(
        "use crate::{lease::Lease, core};\nlet x = crate::wait::f(); // crate::lock\n",
    );
    let want: BTreeSet<String> = ["lease", "core", "wait"].map(String::from).into();
    assert_eq!(named, want);
}
