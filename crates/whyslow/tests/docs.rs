//! The documentation points at what exists: every relative link in the
//! README, in `docs/` and in `bench/RESULTS.md` resolves, every repository
//! path they name in backticks is there, the README stays a front door (at
//! most `README_MAX_LINES` lines) and links to every page of `docs/`.

use std::path::{Path, PathBuf};

/// The repository root.
const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
/// The README is a front door; depth goes to `docs/`.
const README_MAX_LINES: usize = 400;
/// Backticked text starting with one of these names a path in the repository.
const PATH_PREFIXES: [&str; 6] = ["crates/", "docs/", "bench/", "scripts/", "fuzz/", ".ci/"];
/// Characters that make backticked text a pattern, a placeholder or an
/// abbreviation rather than a path.
const NOT_A_PATH: [char; 4] = ['*', '<', '{', '…'];

fn root() -> PathBuf {
    PathBuf::from(ROOT)
}

/// The README, every `*.md` under `docs/` (recursively) and `bench/RESULTS.md`.
fn documents() -> Vec<PathBuf> {
    let mut out = vec![root().join("README.md"), root().join("bench/RESULTS.md")];
    let mut dirs = vec![root().join("docs")];
    while let Some(dir) = dirs.pop() {
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|x| x == "md") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// `text` with the lines of fenced code blocks emptied (line numbers kept):
/// what is inside a fence is output, not links or paths.
fn prose(text: &str) -> String {
    let mut fenced = false;
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let fence = line.trim_start().starts_with("```") || line.trim_start().starts_with("~~~");
        if fence {
            fenced = !fenced;
        } else if !fenced {
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

/// 1-based line of byte `at` in `text`.
fn line_of(text: &str, at: usize) -> usize {
    text[..at].matches('\n').count() + 1
}

/// Markdown link targets, `[text](target)`, with their lines: the target up
/// to its closing parenthesis, without a title or angle brackets.
fn link_targets(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = text[from..].find("](") {
        let start = from + i + 2;
        let Some(len) = text[start..].find(')') else {
            break;
        };
        let raw = text[start..start + len].trim();
        let target = raw.split_whitespace().next().unwrap_or("");
        let target = target.trim_start_matches('<').trim_end_matches('>');
        out.push((line_of(text, start), target.to_string()));
        from = start + len;
    }
    out
}

/// Inline code spans (`` `text` ``, or with longer runs of backticks), with
/// their lines.
fn code_spans(text: &str) -> Vec<(usize, String)> {
    let bytes = text.as_bytes();
    let run_at = |i: usize| bytes[i..].iter().take_while(|&&b| b == b'`').count();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'`' {
            i += 1;
            continue;
        }
        let run = run_at(i);
        let start = i + run;
        // The closing run: the next run of exactly as many backticks.
        let mut j = start;
        let mut end = None;
        while j < bytes.len() {
            if bytes[j] == b'`' {
                let r = run_at(j);
                if r == run {
                    end = Some(j);
                    break;
                }
                j += r;
            } else {
                j += 1;
            }
        }
        let Some(end) = end else {
            break;
        };
        out.push((line_of(text, start), text[start..end].to_string()));
        i = end + run;
    }
    out
}

/// The repository path backticked text names, if it names one: it starts
/// with a path prefix and holds no space, pattern or ellipsis. A trailing
/// `:line` (or `:line-line`) and trailing punctuation are not the path's.
fn repository_path(code: &str) -> Option<&str> {
    let code = code.trim();
    if !PATH_PREFIXES.iter().any(|p| code.starts_with(p))
        || code.contains(char::is_whitespace)
        || code.contains(NOT_A_PATH)
    {
        return None;
    }
    let mut path = code.trim_end_matches(['.', ',', ';', ':', ')', '!', '?']);
    if let Some((before, after)) = path.rsplit_once(':') {
        if !after.is_empty() && after.chars().all(|c| c.is_ascii_digit() || c == '-') {
            path = before;
        }
    }
    Some(path)
}

/// Whether a link target points outside the repository or within the page.
fn external(target: &str) -> bool {
    ["http://", "https://", "mailto:", "#"]
        .iter()
        .any(|p| target.starts_with(p))
}

/// Every broken link and path of `doc`, one line each.
fn broken_in(doc: &Path, text: &str) -> Vec<String> {
    let shown = doc
        .strip_prefix(root())
        .unwrap_or(doc)
        .display()
        .to_string();
    let dir = doc.parent().expect("a document is in a directory");
    let text = prose(text);
    let mut out = Vec::new();
    for (line, target) in link_targets(&text) {
        if external(&target) {
            continue;
        }
        let file = target.split('#').next().unwrap_or("");
        if file.is_empty() || !dir.join(file).exists() {
            out.push(format!("{shown}:{line}: link ({target}) points at nothing"));
        }
    }
    for (line, code) in code_spans(&text) {
        if let Some(path) = repository_path(&code) {
            if !root().join(path).exists() {
                out.push(format!("{shown}:{line}: `{code}` names no file"));
            }
        }
    }
    out
}

#[test]
fn the_readme_is_a_front_door() {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let lines = readme.lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines, at most {README_MAX_LINES}: move depth into docs/"
    );
}

#[test]
fn every_link_and_path_in_the_docs_exists() {
    let docs = documents();
    assert!(docs.len() > 3, "{docs:?}");
    let mut broken = Vec::new();
    for doc in &docs {
        let text =
            std::fs::read_to_string(doc).unwrap_or_else(|e| panic!("{}: {e}", doc.display()));
        broken.extend(broken_in(doc, &text));
    }
    assert!(
        broken.is_empty(),
        "{} broken link(s) or path(s):\n{}",
        broken.len(),
        broken.join("\n")
    );
}

#[test]
fn the_readme_links_to_every_page_of_docs() {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let linked: Vec<String> = link_targets(&prose(&readme))
        .into_iter()
        .map(|(_, t)| t.split('#').next().unwrap_or("").to_string())
        .collect();
    let missing: Vec<String> = documents()
        .iter()
        .filter_map(|d| d.strip_prefix(root()).ok())
        .map(|d| d.display().to_string())
        .filter(|d| d.starts_with("docs/") && !linked.contains(d))
        .collect();
    assert!(
        missing.is_empty(),
        "README.md's \"Where to go next\" links to none of: {missing:?}"
    );
}

#[test]
fn the_checker_sees_what_is_broken() {
    let doc = root().join("docs/page.md");
    let text = "See [ok](../README.md#exit-codes), [web](https://example.com), \
                [here](#top) and [gone](missing.md).\n\
                `crates/whyslow/tests/docs.rs:12`, `crates/nothing/here.rs`, \
                `crates/*/src`, `whyslow analyze`, `docs/…`.\n\
                ```text\n[fenced](nowhere.md) `crates/fenced.rs`\n```\n\
                `` a `crates/x` inside `` and ``docs/gone.md``\n";
    let broken = broken_in(&doc, text);
    assert_eq!(
        broken,
        vec![
            "docs/page.md:1: link (missing.md) points at nothing".to_string(),
            "docs/page.md:2: `crates/nothing/here.rs` names no file".to_string(),
            "docs/page.md:6: `docs/gone.md` names no file".to_string(),
        ],
        "{broken:#?}"
    );
}
