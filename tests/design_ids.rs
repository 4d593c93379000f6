//! The invariants of docs/design.md keep one id each, and its map of them stays true.
//!
//! The table in §1 lists every invariant once, with the section that states it, what
//! enforces it and what checks it. This test reads the design and the sources and fails
//! when an id is cited (in the design, or in any file under `src/`, `tests/`, `benches/`,
//! `examples/` or `docs/`) that the table does not list; when the table lists an id twice;
//! when a row's statement is not in the section it names; and when a row names something
//! that does not exist: a path, an item in a file (`path::name`: a function, a type, a
//! test), a chaos scenario (S22, H3f, P1a, RW1: a test function of `tests/chaos/`) or a
//! planted bug (a `CamelCase` name: a variant of `Mutant` in `src/mutants.rs`).
//!
//! No server is started: the test reads files only.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

/// The design document, relative to the crate's root.
const DESIGN: &str = "docs/design.md";

/// The header of the invariant table.
const HEADER: &str = "| # | invariant | stated in | enforced in | checked by |";

/// Where invariant ids may be cited, relative to the crate's root.
const CITING: &[&str] = &[
    "src", "tests", "benches", "examples", "docs", "cli", "testkit",
];

/// The files of those folders whose text is read for citations.
const TEXT: &[&str] = &["rs", "lua", "md", "toml", "sh"];

/// One row of the invariant table.
#[derive(Debug)]
struct Row {
    id: u32,
    /// Line in the design, from 1.
    line: usize,
    stated: String,
    enforced: String,
    checked: String,
}

/// An invariant id at `at`: `I` and digits, a word of its own (`I4`, not `I4a` or `MI4`).
fn ids(text: &str) -> Vec<(u32, usize)> {
    let bytes = text.as_bytes();
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut found = Vec::new();
    let mut line = 1;
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'\n' {
            line += 1;
            continue;
        }
        if b != b'I' || (i > 0 && word(bytes[i - 1])) {
            continue;
        }
        let digits = bytes[i + 1..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        let end = i + 1 + digits;
        if digits == 0 || bytes.get(end).is_some_and(|&b| word(b)) {
            continue;
        }
        if let Ok(id) = text[i + 1..end].parse() {
            found.push((id, line));
        }
    }
    found
}

/// The invariant table's rows, or why it cannot be read.
fn table(design: &str) -> Result<Vec<Row>, String> {
    let lines: Vec<&str> = design.lines().collect();
    let Some(head) = lines.iter().position(|l| l.trim() == HEADER) else {
        return Err(format!(
            "{DESIGN} has no invariant table (a line `{HEADER}`)"
        ));
    };
    let mut rows = Vec::new();
    for (i, line) in lines.iter().enumerate().skip(head + 2) {
        let Some(inner) = line
            .trim()
            .strip_prefix('|')
            .and_then(|l| l.strip_suffix('|'))
        else {
            break;
        };
        let cells: Vec<&str> = inner.split('|').map(str::trim).collect();
        let [id, _statement, stated, enforced, checked] = cells[..] else {
            return Err(format!(
                "{DESIGN}:{}: a row of the invariant table has {} cells, not 5",
                i + 1,
                cells.len()
            ));
        };
        let Some(id) = id.strip_prefix('I').and_then(|n| n.parse().ok()) else {
            return Err(format!(
                "{DESIGN}:{}: {id:?} is not an invariant id (I and a number)",
                i + 1
            ));
        };
        rows.push(Row {
            id,
            line: i + 1,
            stated: stated.to_owned(),
            enforced: enforced.to_owned(),
            checked: checked.to_owned(),
        });
    }
    if rows.is_empty() {
        return Err(format!("{DESIGN}: the invariant table has no rows"));
    }
    Ok(rows)
}

/// Where each invariant is stated: a paragraph opening with `**I<n>.`, and the number of
/// the section (`## §<n>`) it lies in.
fn statements(design: &str) -> BTreeMap<u32, Vec<(usize, String)>> {
    let mut out: BTreeMap<u32, Vec<(usize, String)>> = BTreeMap::new();
    let mut section = String::new();
    for (i, line) in design.lines().enumerate() {
        if let Some(rest) = line.strip_prefix("## §") {
            section = format!("§{}", rest.split_whitespace().next().unwrap_or_default());
        }
        let Some(rest) = line.strip_prefix("**I") else {
            continue;
        };
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        if rest[digits.len()..].starts_with('.')
            && let Ok(id) = digits.parse()
        {
            out.entry(id).or_default().push((i + 1, section.clone()));
        }
    }
    out
}

/// The code spans of a cell (between backticks), and the words outside them.
fn spans(cell: &str) -> (Vec<&str>, Vec<&str>) {
    let (mut code, mut words) = (Vec::new(), Vec::new());
    for (i, part) in cell.split('`').enumerate() {
        if i % 2 == 1 {
            code.push(part);
        } else {
            words.extend(part.split(|c: char| !c.is_ascii_alphanumeric()));
        }
    }
    (code, words)
}

/// Whether `text` has `needle` as a word of its own, followed by `then` (any non-word
/// character when empty).
fn has_word(text: &str, needle: &str, then: &[char]) -> bool {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(needle).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + needle.len()..].chars().next();
        !before.is_some_and(word)
            && match after {
                None => then.is_empty(),
                Some(c) if then.is_empty() => !word(c),
                Some(c) => then.contains(&c),
            }
    })
}

/// Why the reference `code` (a code span of an "enforced in" or "checked by" cell) names
/// nothing, if it does not. `files` maps each path under the citing folders to its text.
fn dangling(code: &str, files: &BTreeMap<String, String>) -> Option<String> {
    let mut parts = code.split("::");
    let path = parts.next().unwrap_or_default();
    if !path.contains('/') {
        if code.contains("::") {
            return Some(format!(
                "`{code}` names an item without its file (`path::name`)"
            ));
        }
        return None;
    }
    let text = match files.get(path) {
        Some(text) => text,
        None if path.ends_with('/') && files.keys().any(|f| f.starts_with(path)) => {
            return None;
        }
        None => return Some(format!("`{code}`: there is no {path}")),
    };
    for name in parts {
        let lower = name.starts_with(|c: char| c.is_ascii_lowercase());
        let found = match (lower, path.ends_with(".lua")) {
            (true, true) => has_word(text, &format!("function {name}"), &['(']),
            (true, false) => has_word(text, &format!("fn {name}"), &['(', '<']),
            (false, _) => has_word(text, name, &[]),
        };
        if !found {
            return Some(format!("`{code}`: {path} has no `{name}`"));
        }
    }
    None
}

/// Whether `word` is a chaos scenario id (S22, S30f, H3f, P1a, RW1).
fn is_scenario(word: &str) -> bool {
    let letters =
        word.trim_end_matches(|c: char| c.is_ascii_alphanumeric() && !c.is_ascii_uppercase());
    let rest = &word[letters.len()..];
    let digits = rest.chars().take_while(char::is_ascii_digit).count();
    matches!(letters, "S" | "H" | "P" | "RW")
        && digits > 0
        && rest[digits..].chars().all(|c| c.is_ascii_lowercase())
        && rest.len() - digits <= 1
}

/// Whether a chaos scenario has its test: a function of `tests/chaos/` whose name is the
/// id in lower case, alone or followed by `_` (`s22_…`, `p1a(`), or, for an id without a
/// variant letter, by one (`h5f_…` for H5).
fn scenario_exists(id: &str, files: &BTreeMap<String, String>) -> bool {
    let lower = id.to_ascii_lowercase();
    let variant = !id.ends_with(|c: char| c.is_ascii_lowercase());
    files
        .iter()
        .filter(|(path, _)| path.starts_with("tests/chaos/"))
        .any(|(_, text)| {
            text.match_indices(&format!("fn {lower}")).any(|(at, m)| {
                let mut after = text[at + m.len()..].chars();
                match after.next() {
                    Some('_' | '(') => true,
                    Some(c) if variant && c.is_ascii_lowercase() => after.next() == Some('_'),
                    _ => false,
                }
            })
        })
}

/// Whether `code` reads as a planted bug's name: `CamelCase` with two humps or more.
fn is_mutant(code: &str) -> bool {
    code.starts_with(|c: char| c.is_ascii_uppercase())
        && code.chars().all(|c| c.is_ascii_alphanumeric())
        && code.chars().filter(char::is_ascii_uppercase).count() >= 2
        && code.chars().any(|c| c.is_ascii_lowercase())
}

/// Every problem with the ids and the table: `design` is the design's text, `files` every
/// file under the citing folders (path from the crate's root, text).
fn problems(design: &str, files: &BTreeMap<String, String>) -> Vec<String> {
    let rows = match table(design) {
        Ok(rows) => rows,
        Err(e) => return vec![e],
    };
    let mut out = Vec::new();
    let mut listed: BTreeMap<u32, usize> = BTreeMap::new();
    for row in &rows {
        if let Some(first) = listed.insert(row.id, row.line) {
            out.push(format!(
                "{DESIGN}:{}: the invariant table lists I{} twice (also at line {first})",
                row.line, row.id
            ));
        }
    }
    let citing = std::iter::once((DESIGN, design)).chain(
        files
            .iter()
            .filter(|(path, _)| path.as_str() != DESIGN)
            .map(|(path, text)| (path.as_str(), text.as_str())),
    );
    for (path, text) in citing {
        for (id, line) in ids(text) {
            if !listed.contains_key(&id) {
                out.push(format!(
                    "{path}:{line}: cites I{id}, which the invariant table ({DESIGN} §1) does \
                     not list"
                ));
            }
        }
    }
    let stated = statements(design);
    for row in &rows {
        let at = |what: &str| format!("{DESIGN}:{}: I{}'s {what}", row.line, row.id);
        match stated.get(&row.id).map(Vec::as_slice) {
            None | Some([]) => out.push(format!(
                "{} names no paragraph: none opens with `**I{}.`",
                at("row"),
                row.id
            )),
            Some([(line, section)]) => {
                if !row.stated.split([',', ' ']).any(|s| s == section) {
                    out.push(format!(
                        "{} is {:?}, but line {line} states it in {section}",
                        at("\"stated in\""),
                        row.stated
                    ));
                }
            }
            Some(several) => out.push(format!(
                "{DESIGN}:{}: I{} is stated more than once, at lines {:?}",
                row.line,
                row.id,
                several.iter().map(|(l, _)| l).collect::<Vec<_>>()
            )),
        }
        for (column, cell) in [
            ("\"enforced in\"", &row.enforced),
            ("\"checked by\"", &row.checked),
        ] {
            let (code, words) = spans(cell);
            if !code.iter().any(|c| c.contains('/')) {
                out.push(format!("{} names no file", at(column)));
            }
            for c in &code {
                if let Some(why) = dangling(c, files) {
                    out.push(format!("{} names {why}", at(column)));
                }
            }
            if column == "\"checked by\"" {
                let mutants = files.get("src/mutants.rs").map_or("", String::as_str);
                for c in code.iter().filter(|c| is_mutant(c)) {
                    if !has_word(mutants, c, &[]) {
                        out.push(format!(
                            "{} names `{c}`, which is no planted bug of src/mutants.rs",
                            at(column)
                        ));
                    }
                }
                for w in words.iter().filter(|w| is_scenario(w)) {
                    if !scenario_exists(w, files) {
                        out.push(format!(
                            "{} names scenario {w}, which has no test function in tests/chaos/",
                            at(column)
                        ));
                    }
                }
            }
        }
    }
    out
}

/// Every file under `dir` (a path from `root`), with its text if it is text.
fn walk(root: &Path, dir: &str, out: &mut BTreeMap<String, String>) {
    let Ok(entries) = fs::read_dir(root.join(dir)) else {
        return;
    };
    for entry in entries {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = format!("{dir}/{name}");
        if entry.file_type().unwrap().is_dir() {
            walk(root, &path, out);
            continue;
        }
        let text = match Path::new(&name).extension() {
            Some(ext) if TEXT.iter().any(|t| ext == *t) => {
                fs::read_to_string(entry.path()).unwrap_or_default()
            }
            _ => String::new(),
        };
        out.insert(path, text);
    }
}

#[test]
fn every_invariant_id_is_in_the_table_once_and_its_row_names_what_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let design = fs::read_to_string(root.join(DESIGN)).unwrap();
    let mut files = BTreeMap::new();
    for dir in CITING {
        walk(root, dir, &mut files);
    }
    let rows = table(&design).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        rows.len() >= 20,
        "only {} invariants in the table",
        rows.len()
    );
    let found = problems(&design, &files);
    assert!(
        found.is_empty(),
        "{} problem(s) with the invariant ids of {DESIGN}:\n{}",
        found.len(),
        found.join("\n")
    );
}

/// The check fires: on a design and sources made by hand, each kind of problem is found.
#[test]
fn the_check_finds_unlisted_ids_duplicates_and_dangling_names() {
    let file = |path: &str, text: &str| (path.to_owned(), text.to_owned());
    let files: BTreeMap<String, String> = [
        file("src/a.rs", "// Keeps I1.\nfn guard() {}\nstruct Tally;\n"),
        file("src/mutants.rs", "pub enum Mutant { HalfQuorum }\n"),
        file("src/s.lua", "local function live_head(q)\n"),
        file("tests/b.rs", "#[test]\nfn one_holds() {}\n"),
        file(
            "tests/chaos/x.rs",
            "async fn s22_two_lists() {}\npub async fn h5(x: u8) {}\n",
        ),
    ]
    .into_iter()
    .collect();
    let design = |rows: &str, body: &str| {
        format!(
            "# d\n\n## §1 One\n\n{HEADER}\n|---|---|---|---|---|\n{rows}\n## §2 Two\n\n{body}\n"
        )
    };
    let good_row = "| I1 | one | §2 | `src/a.rs::guard`, `src/a.rs::Tally`, `src/s.lua::live_head` \
                    | `tests/b.rs::one_holds`; `HalfQuorum` (S22, H5) |\n";
    let good = design(good_row, "**I1. One.** Because.");
    assert_eq!(problems(&good, &files), Vec::<String>::new());

    // An id cited that the table lacks, in a source and in the design.
    let unlisted = format!("I{}", 7 * 11);
    let mut cited = files.clone();
    cited.insert("tests/c.rs".into(), format!("// Checks {unlisted}.\n"));
    let found = problems(&good, &cited);
    assert!(
        found.len() == 1
            && found[0].starts_with("tests/c.rs:1: cites")
            && found[0].contains(&unlisted),
        "{found:?}"
    );
    let found = problems(
        &design(good_row, &format!("**I1. One.** By {unlisted}.")),
        &files,
    );
    assert!(
        found.len() == 1 && found[0].contains(&unlisted),
        "{found:?}"
    );

    // A duplicate row.
    let found = problems(
        &design(&format!("{good_row}{good_row}"), "**I1. One.**"),
        &files,
    );
    assert!(
        found.iter().any(|p| p.contains("lists I1 twice")),
        "{found:?}"
    );

    // A statement in another section than the row says, and one stated nowhere.
    let found = problems(
        &design(&good_row.replace("§2", "§1"), "**I1. One.**"),
        &files,
    );
    assert!(
        found.iter().any(|p| p.contains("states it in §2")),
        "{found:?}"
    );
    let found = problems(&design(good_row, "I1 holds."), &files);
    assert!(
        found.iter().any(|p| p.contains("names no paragraph")),
        "{found:?}"
    );

    // Names that do not exist: a file, an item, a planted bug, a scenario, a bare item.
    for (from, to, says) in [
        (
            "src/a.rs::guard",
            "src/gone.rs::guard",
            "there is no src/gone.rs",
        ),
        (
            "src/a.rs::guard",
            "src/a.rs::gone",
            "src/a.rs has no `gone`",
        ),
        (
            "src/s.lua::live_head",
            "src/s.lua::guard",
            "src/s.lua has no `guard`",
        ),
        (
            "tests/b.rs::one_holds",
            "tests/b.rs::one",
            "tests/b.rs has no `one`",
        ),
        (
            "HalfQuorum",
            "QuarterQuorum",
            "`QuarterQuorum`, which is no planted bug",
        ),
        ("S22", "S23", "scenario S23"),
        ("H5", "H6", "scenario H6"),
        ("src/a.rs::Tally", "Tally::record", "without its file"),
    ] {
        let row = good_row.replace(from, to);
        let found = problems(&design(&row, "**I1. One.**"), &files);
        assert!(found.iter().any(|p| p.contains(says)), "{to}: {found:?}");
    }
    assert!(is_scenario("S30f") && is_scenario("RW1") && is_scenario("P1a"));
    assert!(!is_scenario("S") && !is_scenario("SET") && !is_scenario("S1ab") && !is_scenario("T1"));
}
