//! Architecture invariant: neither crate has an import circle, and the
//! runtime crate's modules only import from their own layer or below.
//!
//! The test reads the sources (`src/` for `coral`, `shards/src/` for
//! `coral-shards`), takes each file as a module named by its path
//! (`src/dsht/node/mod.rs` is `dsht::node`), and draws an edge from a
//! module to every module its paths name: `use` trees and paths in code
//! that start with `crate::`, `super::`, `self::` or one of the module's
//! own submodules. A module's use of its own parent or grandparent
//! (`super::`) is not an edge: a folder is one unit to the rest of the
//! crate. Its use of the crate root is one. A name a module re-exports
//! (`pub use x::Y` in `lib.rs`) is followed to where it is defined, so
//! `crate::Id` points at `id`, not at the crate root. Comments, strings and `#[cfg(test)]` modules are
//! skipped: tests may reach anywhere. A strongly connected component of
//! more than one module is a circle; the test prints each one.
//!
//! Print the whole graph of both crates:
//! `cargo test --test import_graph -- --ignored --nocapture print_import_graph`
//! (or `scripts/import-graph.sh`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// `shards/src/`'s layers, lowest first: a module may import from its own
/// layer and those below, never from one above. Every top-level module of
/// the crate must be listed (a new one is placed on purpose); submodules
/// take their top-level module's layer. The crate root (`main.rs`) is the
/// command line, above everything.
const SHARDS_LAYERS: &[(&str, &[&str])] = &[
    (
        "platform",
        &[
            "limits",
            "clock",
            "config",
            "logging",
            "metrics",
            "accesslog",
            "steer",
            "hints",
            "lifecycle",
            "accept",
            "runtime",
            "identity",
        ],
    ),
    ("services", &["cache", "status", "proxy", "dns", "admin"]),
    (
        "cli",
        &[
            "serve",
            "client",
            "top",
            "sim",
            "sim_threads",
            "demo",
            "crate",
        ],
    ),
];

/// A module path: `[]` is the crate root.
type Module = Vec<String>;

fn show(m: &Module) -> String {
    if m.is_empty() {
        "crate".to_string()
    } else {
        m.join("::")
    }
}

/// The module a source file is, from its path under the crate's `src/`.
fn module_of(rel: &Path) -> Module {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let file = parts.pop().unwrap_or_default();
    let stem = file.trim_end_matches(".rs");
    if !(parts.is_empty() && (stem == "lib" || stem == "main")) && stem != "mod" {
        parts.push(stem.to_string());
    }
    parts
}

/// Every `.rs` file under `dir`, sorted.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let p = entry.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// `text` with comments, string and character literals blanked out
/// (newlines kept), so that only code is searched.
fn code_only(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < c.len() {
        if c[i] == '/' && c.get(i + 1) == Some(&'/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if c[i] == '/' && c.get(i + 1) == Some(&'*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if c[i] == '\n' {
                        out.push('\n');
                    }
                    i += 1;
                }
            }
        } else if c[i] == 'r'
            && matches!(c.get(i + 1), Some('"' | '#'))
            && (i == 0 || !(c[i - 1].is_alphanumeric() || c[i - 1] == '_'))
        {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while c.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if c.get(j) != Some(&'"') {
                out.push(c[i]);
                i += 1;
                continue;
            }
            j += 1;
            'raw: while j < c.len() {
                if c[j] == '"' && (0..hashes).all(|h| c.get(j + 1 + h) == Some(&'#')) {
                    j += 1 + hashes;
                    break 'raw;
                }
                if c[j] == '\n' {
                    out.push('\n');
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c[i] == '"' {
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    i += 1;
                }
                if c.get(i) == Some(&'\n') {
                    out.push('\n');
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c[i] == '\'' {
            // A character literal ('x', '\n', '\u{..}') or a lifetime ('a).
            if c.get(i + 1) == Some(&'\\') {
                let mut j = i + 2;
                while j < c.len() && c[j] != '\'' {
                    j += 1;
                }
                i = j + 1;
                out.push_str("' '");
            } else if c.get(i + 2) == Some(&'\'') {
                i += 3;
                out.push_str("' '");
            } else {
                out.push(c[i]);
                i += 1;
            }
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

/// `code` without the bodies of `#[cfg(test)]` modules, and the names of
/// the test modules it declares in files of their own (`mod tests;`).
fn without_tests(code: &str) -> (String, BTreeSet<String>) {
    let mut test_files = BTreeSet::new();
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "#[cfg(test)]".len()..];
        let trimmed = after.trim_start();
        // Past a visibility (`pub`, `pub(crate)`), if any.
        let trimmed = match trimmed.strip_prefix("pub") {
            Some(rest) if rest.starts_with('(') => {
                rest.split_once(')').map_or(rest, |(_, r)| r).trim_start()
            }
            Some(rest) if rest.starts_with(' ') => rest.trim_start(),
            _ => trimmed,
        };
        let is_mod = trimmed.starts_with("mod ");
        let open = after.find(['{', ';']);
        match open {
            Some(o) if is_mod && after.as_bytes()[o] == b'{' => {
                let mut depth = 0;
                let mut end = after.len();
                for (k, ch) in after[o..].char_indices() {
                    match ch {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = o + k + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                rest = &after[end..];
            }
            Some(o) if is_mod => {
                let name = trimmed.trim_start_matches("mod ");
                let name: String = name.chars().take_while(|&c| is_ident_char(c)).collect();
                test_files.insert(name);
                rest = &after[o..];
            }
            _ => rest = after,
        }
    }
    out.push_str(rest);
    (out, test_files)
}

fn is_ident_char(ch: char) -> bool {
    ch.is_alphanumeric() || ch == '_'
}

/// The use trees of `code`'s `use` declarations, expanded into paths
/// (`use a::{b, c::d as e}` gives `a::b`, `a::c::d`), with the name each
/// binds (`None` for a glob).
fn use_paths(code: &str) -> Vec<(Vec<String>, Option<String>)> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let mut from = 0;
    while let Some(k) = code[from..].find("use ") {
        let at = from + k;
        from = at + 4;
        if at > 0 && is_ident_char(bytes[at - 1] as char) {
            continue;
        }
        let Some(end) = code[at..].find(';') else {
            break;
        };
        let tree = tidy(&code[at + 4..at + end]);
        expand(&tree, &mut Vec::new(), &mut out);
        from = at + end;
    }
    out
}

/// A use tree with whitespace only where it separates words (`a as b`).
fn tidy(tree: &str) -> String {
    let words: Vec<&str> = tree.split_whitespace().collect();
    let mut out = String::new();
    for w in words {
        let joins = out.ends_with([':', '{', ',']) || w.starts_with([':', '{', '}', ',']);
        if !out.is_empty() && !joins {
            out.push(' ');
        }
        out.push_str(w);
    }
    out
}

fn expand(tree: &str, prefix: &mut Vec<String>, out: &mut Vec<(Vec<String>, Option<String>)>) {
    let tree = tree.trim_start_matches("::");
    if let Some(open) = tree.find('{') {
        let head: Vec<String> = tree[..open]
            .split("::")
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        let inner = inner.trim();
        let depth0 = prefix.len();
        prefix.extend(head);
        let mut depth = 0;
        let mut start = 0;
        for (k, ch) in inner.char_indices() {
            match ch {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand(&inner[start..k], prefix, out);
                    start = k + 1;
                }
                _ => {}
            }
        }
        if start < inner.len() {
            expand(&inner[start..], prefix, out);
        }
        prefix.truncate(depth0);
        return;
    }
    if tree.is_empty() {
        return;
    }
    // `a::b as c` binds `c`; the module reached is `a::b`'s.
    let (path, alias) = match tree.split_once(" as ") {
        Some((p, a)) => (p, Some(a.to_string())),
        None => (tree, None),
    };
    let mut full = prefix.clone();
    full.extend(
        path.split("::")
            .filter(|s| !s.is_empty())
            .map(str::to_string),
    );
    let name = match full.last().map(String::as_str) {
        Some("*") => {
            full.pop();
            None
        }
        Some("self") => {
            full.pop();
            full.last().cloned()
        }
        other => other.map(str::to_string),
    };
    out.push((full, alias.or(name)));
}

/// Paths in code outside `use` declarations whose first segment is one of
/// `starts`: `crate::a::b`, `super::x`.
fn code_paths(code: &str, starts: &BTreeSet<String>) -> Vec<Vec<String>> {
    let c: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        if is_ident_char(c[i]) && (i == 0 || !(is_ident_char(c[i - 1]) || c[i - 1] == ':')) {
            let mut segs = Vec::new();
            let mut j = i;
            loop {
                let s = j;
                while j < c.len() && is_ident_char(c[j]) {
                    j += 1;
                }
                segs.push(c[s..j].iter().collect::<String>());
                if c.get(j) == Some(&':')
                    && c.get(j + 1) == Some(&':')
                    && c.get(j + 2).is_some_and(|&ch| is_ident_char(ch))
                {
                    j += 2;
                } else {
                    break;
                }
            }
            if segs.len() > 1 && starts.contains(&segs[0]) {
                out.push(segs);
            }
            i = j.max(i + 1);
        } else {
            i += 1;
        }
    }
    out
}

/// One crate's module graph.
struct Graph {
    /// Module -> the modules it imports from.
    edges: BTreeMap<Module, BTreeSet<Module>>,
}

/// What one module's file says: its submodules and its `use` paths.
struct Parsed {
    children: BTreeSet<String>,
    /// Submodules compiled for tests only.
    test_children: BTreeSet<String>,
    uses: Vec<(Vec<String>, Option<String>)>,
    paths: Vec<Vec<String>>,
}

fn parse(code: &str) -> Parsed {
    let (code, test_children) = without_tests(code);
    let mut children = BTreeSet::new();
    for line in code.lines() {
        let t = line.trim_start();
        let t = t
            .strip_prefix("pub(crate) ")
            .or_else(|| t.strip_prefix("pub "))
            .unwrap_or(t);
        if let Some(rest) = t.strip_prefix("mod ") {
            let name: String = rest.chars().take_while(|&c| is_ident_char(c)).collect();
            if !name.is_empty() {
                children.insert(name);
            }
        }
    }
    let uses = use_paths(&code);
    let mut starts: BTreeSet<String> = ["crate", "super", "self"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    starts.extend(children.iter().cloned());
    let paths = code_paths(&code, &starts);
    Parsed {
        children,
        test_children,
        uses,
        paths,
    }
}

/// Builds the graph of the crate whose sources are under `src`.
fn graph(src: &Path) -> Graph {
    let mut files: BTreeMap<Module, Parsed> = BTreeMap::new();
    for path in sources(src) {
        let rel = path.strip_prefix(src).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        files.insert(module_of(rel), parse(&code_only(&text)));
    }
    // Test-only files (`#[cfg(test)] mod tests;`) and what is under them.
    let test_only: Vec<Module> = files
        .keys()
        .filter(|m| {
            (1..=m.len()).any(|n| {
                let (parent, name) = (&m[..n - 1], &m[n - 1]);
                files
                    .get(parent)
                    .is_some_and(|p| p.test_children.contains(name))
            })
        })
        .cloned()
        .collect();
    for m in test_only {
        files.remove(&m);
    }
    // Re-exports: module -> name it binds -> the absolute path it names.
    let mut binds: BTreeMap<Module, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    for (m, p) in &files {
        for (path, name) in &p.uses {
            if let (Some(abs), Some(name)) = (absolute(m, path, &files), name) {
                binds
                    .entry(m.clone())
                    .or_default()
                    .insert(name.clone(), abs);
            }
        }
    }
    let mut edges: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for (m, p) in &files {
        let set = edges.entry(m.clone()).or_default();
        let all = p.uses.iter().map(|(path, _)| path).chain(p.paths.iter());
        for path in all {
            let Some(abs) = absolute(m, path, &files) else {
                continue;
            };
            let to = resolve(&abs, &files, &binds, 0);
            // A submodule reads its parent's items freely (Rust's privacy
            // makes them its own): a folder is one unit to the outside.
            if to.is_empty() || !m.starts_with(&to) {
                set.insert(to);
            }
        }
    }
    Graph { edges }
}

/// `path`, written in module `m`, as a path from the crate root; `None`
/// when it leaves the crate (`std::`, `coral::`).
fn absolute(m: &Module, path: &[String], files: &BTreeMap<Module, Parsed>) -> Option<Vec<String>> {
    let first = path.first()?;
    let mut base: Vec<String> = m.clone();
    let mut rest = path;
    match first.as_str() {
        "crate" => {
            base.clear();
            rest = &path[1..];
        }
        "self" => rest = &path[1..],
        "super" => {
            while rest.first().is_some_and(|s| s == "super") {
                base.pop();
                rest = &rest[1..];
            }
        }
        name if files.get(m).is_some_and(|p| p.children.contains(name)) => {}
        _ => return None,
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// The module (file) an absolute path lands in: its longest prefix that is
/// a file, following a name re-exported there to where it comes from.
fn resolve(
    abs: &[String],
    files: &BTreeMap<Module, Parsed>,
    binds: &BTreeMap<Module, BTreeMap<String, Vec<String>>>,
    depth: usize,
) -> Module {
    let mut n = abs.len();
    while n > 0 && !files.contains_key(&abs[..n].to_vec()) {
        n -= 1;
    }
    let m: Module = abs[..n].to_vec();
    if depth < 8 {
        if let Some(next) = abs.get(n) {
            if let Some(target) = binds.get(&m).and_then(|b| b.get(next)) {
                let mut t = target.clone();
                t.extend(abs[n + 1..].iter().cloned());
                let r = resolve(&t, files, binds, depth + 1);
                if r != m {
                    return r;
                }
            }
        }
    }
    m
}

/// Strongly connected components of more than one module (Tarjan).
fn circles(g: &Graph) -> Vec<Vec<Module>> {
    struct State<'a> {
        g: &'a Graph,
        index: BTreeMap<&'a Module, usize>,
        low: BTreeMap<&'a Module, usize>,
        stack: Vec<&'a Module>,
        on: BTreeSet<&'a Module>,
        out: Vec<Vec<Module>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a Module) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on.insert(v);
        for w in s.g.edges.get(v).into_iter().flatten() {
            let Some((w, _)) = s.g.edges.get_key_value(w) else {
                continue;
            };
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(w);
                comp.push(w.clone());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.out.push(comp);
            }
        }
    }
    let mut s = State {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.edges.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

/// The circles of `g` in words, with the edges inside each.
fn describe(g: &Graph, found: &[Vec<Module>]) -> String {
    let mut text = String::new();
    for comp in found {
        let names: Vec<String> = comp.iter().map(show).collect();
        text.push_str(&format!("circle of {}: {}\n", comp.len(), names.join(", ")));
        for m in comp {
            for to in &g.edges[m] {
                if comp.contains(to) {
                    text.push_str(&format!("  {} -> {}\n", show(m), show(to)));
                }
            }
        }
    }
    text
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_core_crate_has_no_import_circle() {
    let g = graph(&root().join("src"));
    let found = circles(&g);
    assert!(found.is_empty(), "src/:\n{}", describe(&g, &found));
}

#[test]
fn the_runtime_crate_has_no_import_circle() {
    let g = graph(&root().join("shards/src"));
    let found = circles(&g);
    assert!(found.is_empty(), "shards/src/:\n{}", describe(&g, &found));
}

/// The layer of `m` in `SHARDS_LAYERS` (by its top-level module).
fn layer_of(m: &Module) -> Option<usize> {
    let top = m.first().map_or("crate", String::as_str);
    SHARDS_LAYERS
        .iter()
        .position(|(_, mods)| mods.contains(&top))
}

#[test]
fn the_runtime_crate_imports_only_downward() {
    let g = graph(&root().join("shards/src"));
    let mut wrong = Vec::new();
    for (m, tos) in &g.edges {
        let Some(from) = layer_of(m) else {
            wrong.push(format!(
                "{} is in no layer: add it to SHARDS_LAYERS",
                show(m)
            ));
            continue;
        };
        for to in tos {
            if let Some(l) = layer_of(to) {
                if l > from {
                    wrong.push(format!(
                        "{} ({}) imports {} ({})",
                        show(m),
                        SHARDS_LAYERS[from].0,
                        show(to),
                        SHARDS_LAYERS[l].0
                    ));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
#[ignore]
fn print_import_graph() {
    for (name, dir) in [("src/", "src"), ("shards/src/", "shards/src")] {
        let g = graph(&root().join(dir));
        println!("{name}");
        for (m, tos) in &g.edges {
            let tos: Vec<String> = tos.iter().map(show).collect();
            println!("  {} -> {}", show(m), tos.join(", "));
        }
        let found = circles(&g);
        if found.is_empty() {
            println!("  no circle");
        } else {
            print!("{}", describe(&g, &found));
        }
    }
}

#[test]
fn paths_are_read_from_use_trees_and_code() {
    let code = code_only(
        "use crate::{a::{B, c}, d as e};\n// crate::x::Y\nfn f() { super::g(); let s = \"crate::z::q\"; kid::h(); }\nmod kid;\n",
    );
    let p = parse(&code);
    let uses: Vec<String> = p.uses.iter().map(|(u, _)| u.join("::")).collect();
    assert_eq!(uses, ["crate::a::B", "crate::a::c", "crate::d"]);
    assert_eq!(p.uses[2].1.as_deref(), Some("e"));
    let paths: Vec<String> = p.paths.iter().map(|u| u.join("::")).collect();
    assert_eq!(paths, ["super::g", "kid::h"]);
    assert_eq!(module_of(Path::new("dsht/node/mod.rs")), ["dsht", "node"]);
    assert_eq!(module_of(Path::new("lib.rs")), Vec::<String>::new());
}
