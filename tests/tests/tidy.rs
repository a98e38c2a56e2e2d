//! Keeps the whole workspace readable: no Rust source file over 600 lines, no function over 80
//! (the limits the proxy's engine set for itself). What is longer today is listed, with its
//! length, in `tests/tidy-allow.txt`; the list can only shrink: an entry that grew fails, and so
//! does one that shrank or is no longer needed until the list says so (so the next change
//! cannot grow it back unseen). A new long file or function fails with its place.
//!
//! `TIDY_PRINT=1 cargo test -p pshmem-tests --test tidy -- --nocapture` prints the list as it
//! would be for the tree now.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};

const MAX_FILE: usize = 600;
const MAX_FN: usize = 80;
/// Entries `tests/tidy-allow.txt` may hold: lower it whenever the list shrinks, so that a line
/// added to the list fails here as well as in review.
const MAX_ALLOWED: usize = 33;

/// Folders that hold no sources of ours (build outputs, tools, environments, other projects'
/// code kept out of the tree).
const SKIP: &[&str] = &[
    "target",
    ".git",
    ".venv",
    ".tools",
    ".ab-before",
    "node_modules",
    "third_party",
];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        let name = e.file_name();
        let name = name.to_string_lossy();
        if p.is_dir() {
            if !SKIP.contains(&name.as_ref()) && !name.starts_with('.') {
                sources(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// (name, first line, lines) of every `fn` item with a body: from its signature to the `}` at
/// its indent.
fn functions(text: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let t = l.trim_start();
        let indent = l.len() - t.len();
        let mut sig = t;
        for q in [
            "pub(crate) ",
            "pub(super) ",
            "pub ",
            "const ",
            "async ",
            "unsafe ",
        ] {
            sig = sig.trim_start_matches(q);
        }
        sig = sig.trim_start_matches("extern \"C\" ");
        let Some(rest) = sig.strip_prefix("fn ") else {
            continue;
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if t.ends_with(';') || (t.contains('{') && t.ends_with('}')) {
            continue; // a declaration, or a one-line body
        }
        let close = format!("{}}}", " ".repeat(indent));
        let end = lines[i..]
            .iter()
            .position(|x| x.trim_end() == close)
            .map_or(lines.len(), |k| i + k);
        out.push((name, i + 1, end - i + 1));
    }
    out
}

/// Every over-long file (`path`) and function (`path::name`, the longest of that name in the
/// file) with its length.
fn over_limits(root: &Path) -> BTreeMap<String, usize> {
    let mut files = Vec::new();
    sources(root, &mut files);
    assert!(files.len() > 100, "found the workspace's sources");
    let mut over = BTreeMap::new();
    for f in &files {
        let text = std::fs::read_to_string(f).expect("read a source");
        let rel = f
            .strip_prefix(root)
            .expect("under the root")
            .to_string_lossy()
            .replace('\\', "/");
        let n = text.lines().count();
        if n > MAX_FILE {
            over.insert(rel.clone(), n);
        }
        for (name, _, len) in functions(&text) {
            if len > MAX_FN {
                let e = over.entry(format!("{rel}::{name}")).or_insert(0);
                *e = (*e).max(len);
            }
        }
    }
    over
}

fn allow_list(path: &Path) -> BTreeMap<String, usize> {
    let text = std::fs::read_to_string(path).expect("tests/tidy-allow.txt");
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (what, n) = l.rsplit_once(' ').expect("'<path or path::fn> <lines>'");
            (what.trim().to_string(), n.parse().expect("a line count"))
        })
        .collect()
}

#[test]
fn files_and_functions_stay_short_and_the_allow_list_only_shrinks() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf();
    let now = over_limits(&root);
    if std::env::var_os("TIDY_PRINT").is_some() {
        for (what, n) in &now {
            println!("{what} {n}");
        }
    }
    let allowed = allow_list(&root.join("tests/tidy-allow.txt"));
    let mut bad = Vec::new();
    if allowed.len() > MAX_ALLOWED {
        bad.push(format!(
            "tests/tidy-allow.txt lists {} entries, more than its {MAX_ALLOWED}: split new code",
            allowed.len()
        ));
    }
    for (what, &n) in &now {
        let limit = if what.contains("::") {
            MAX_FN
        } else {
            MAX_FILE
        };
        match allowed.get(what) {
            None => bad.push(format!("{what}: {n} lines (at most {limit}): split it")),
            Some(&a) if n > a => bad.push(format!("{what}: {n} lines, grown past its {a}")),
            Some(&a) if n < a => bad.push(format!(
                "{what}: {n} lines, shorter than its {a}: write {n} in tests/tidy-allow.txt"
            )),
            Some(_) => {}
        }
    }
    for what in allowed.keys().filter(|w| !now.contains_key(*w)) {
        bad.push(format!(
            "{what}: within the limits now (or gone): remove it from tests/tidy-allow.txt"
        ));
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn the_function_scan_finds_bodies_and_their_ends() {
    let text = "fn a() {}\npub(crate) unsafe fn b(\n    x: u8,\n) -> u8 {\n    x\n}\n    fn c();\n";
    let f = functions(text);
    assert_eq!(f, vec![("b".to_string(), 2, 5)]);
}
