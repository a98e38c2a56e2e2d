//! Keeps the proxy readable: no source file over 600 lines, no engine function over 80 (the
//! limits the engine's split by phase set; a regression fails here, not in review).

use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("proxy/src").flatten() {
        let p = e.path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// (name, first line, lines) of every `fn` item: from its signature to the `}` at its indent.
fn functions(text: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let t = l.trim_start();
        let indent = l.len() - t.len();
        let sig = t
            .trim_start_matches("pub(crate) ")
            .trim_start_matches("pub(super) ")
            .trim_start_matches("pub ")
            .trim_start_matches("const ")
            .trim_start_matches("unsafe ");
        let Some(rest) = sig.strip_prefix("fn ") else {
            continue;
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if t.ends_with(';') {
            continue; // a declaration without a body
        }
        if t.contains('{') && t.ends_with('}') {
            out.push((name, i + 1, 1));
            continue;
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

#[test]
fn files_and_engine_functions_stay_short() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut bad = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).expect("read");
        let n = text.lines().count();
        if n > 600 {
            bad.push(format!("{}: {n} lines (at most 600)", f.display()));
        }
        let engine = f.components().any(|c| c.as_os_str() == "engine");
        if engine && !f.ends_with("tests.rs") {
            for (name, line, len) in functions(&text) {
                if len > 80 {
                    bad.push(format!(
                        "{}:{line}: fn {name} has {len} lines (at most 80)",
                        f.display()
                    ));
                }
            }
        }
    }
    assert!(files.len() > 10, "found the sources");
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn the_function_finder_measures() {
    let text = "impl X {\n    fn a() {\n        1;\n    }\n}\nfn b() {}\n";
    let f = functions(text);
    assert_eq!(f[0], ("a".to_string(), 2, 3));
    assert_eq!(f[1], ("b".to_string(), 6, 1));
}
