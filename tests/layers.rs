//! The modules form layers: model and rules → ingest → the per-operation stages →
//! analysis → summary → report and gate → config → main (docs/architecture.md). This test
//! reads `src/`, collects which module names which other one (`use crate::x`,
//! `crate::x::…`, `use crate::{x, y::{z}}`, `super::x`, `self::x`), and fails on any
//! import cycle, printing it with the file, line and path of each import along it: among
//! the top-level modules, and among the modules of one parent (`report::compare` and
//! `report::html`, say).
//!
//! Test code is left out, and only test code: each `#[cfg(test)]` item — a `mod tests
//! { … }` up to its matching brace, a helper function, a `mod x;` with its file — so that
//! a test may reach for a helper in any module without making the layers circular. So are
//! comments and the insides of string and character literals, where a brace or a
//! `crate::` is no code. Everything under `src/` is read as one crate.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Known cycles, each broken here at one import (`from` → `to`, module paths) until the
/// engineer named removes it; the test fails on any other cycle. Remove an entry with
/// the import it names (a stale one weakens the check): keep this empty.
const ALLOWED: &[(&str, &str, &str)] = &[
    // #43: the HTML renderer draws a comparison's sections, which the comparison module
    // builds, and the comparison calls the HTML renderer; `front` is untangling them.
    ("report::html", "report::compare", "#43 (front)"),
];

/// A module's path from the crate root: `["report", "compare"]`.
type ModulePath = Vec<String>;

/// Where one module names another: the file, the line and the path as written.
#[derive(Debug, Clone, PartialEq)]
struct Import {
    file: String,
    line: usize,
    path: String,
}

/// For each parent module (the crate root is `[]`), which of its child modules names
/// which other, with the first place it does.
type Graphs = BTreeMap<ModulePath, BTreeMap<String, BTreeMap<String, Import>>>;

/// `text` with its comments and the insides of its string and character literals made
/// blanks (the quotes stay); line breaks are kept, so lines keep their numbers.
fn blank_comments_and_literals(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            // Block comments nest in Rust.
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if c == 'r'
            && (i == 0 || !ident(chars[i - 1]) || chars[i - 1] == 'b' || chars[i - 1] == 'c')
            && matches!(next, Some('"') | Some('#'))
            && raw_string_hashes(&chars[i + 1..]).is_some()
        {
            // r"…", r#"…"#: no escapes, ends at a quote followed by as many hashes.
            let hashes = raw_string_hashes(&chars[i + 1..]).expect("checked");
            out.push('r');
            out.extend(std::iter::repeat_n('#', hashes));
            out.push('"');
            i += 1 + hashes + 1;
            while i < chars.len() {
                if chars[i] == '"'
                    && chars[i + 1..].iter().take_while(|&&h| h == '#').count() >= hashes
                {
                    out.push('"');
                    out.extend(std::iter::repeat_n('#', hashes));
                    i += 1 + hashes;
                    break;
                }
                out.push(blank(chars[i]));
                i += 1;
            }
        } else if c == '"' {
            out.push('"');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < chars.len() {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
            if i < chars.len() {
                out.push('"');
                i += 1;
            }
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{7b}'), or else a lifetime ('a, 'static).
            let end = if next == Some('\\') {
                chars[i + 2..]
                    .iter()
                    .position(|&q| q == '\'')
                    .map(|p| i + 2 + p)
            } else if chars.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match end {
                Some(end) => {
                    out.push('\'');
                    out.extend(std::iter::repeat_n(' ', end - i - 1));
                    out.push('\'');
                    i = end + 1;
                }
                None => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// The hashes of a raw string's opening (`#"` → 1) at `rest`, just after its `r`.
fn raw_string_hashes(rest: &[char]) -> Option<usize> {
    let hashes = rest.iter().take_while(|&&c| c == '#').count();
    (rest.get(hashes) == Some(&'"')).then_some(hashes)
}

/// One token of blanked code, with its line (1-based) and its byte range.
#[derive(Debug, Clone, PartialEq)]
struct Token {
    text: String,
    line: usize,
    start: usize,
    end: usize,
}

/// Identifiers, `::` and every other character on its own; blanks between them.
fn tokens(code: &str) -> Vec<Token> {
    let mut out = Vec::new();
    let mut line = 1;
    let mut chars = code.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        if c == '\n' {
            line += 1;
        } else if c.is_whitespace() {
        } else if c.is_alphanumeric() || c == '_' {
            let mut end = at + c.len_utf8();
            while let Some(&(next_at, next)) = chars.peek() {
                if !(next.is_alphanumeric() || next == '_') {
                    break;
                }
                end = next_at + next.len_utf8();
                chars.next();
            }
            out.push(Token {
                text: code[at..end].to_string(),
                line,
                start: at,
                end,
            });
        } else if c == ':' && chars.peek().map(|&(_, n)| n) == Some(':') {
            chars.next();
            out.push(Token {
                text: "::".into(),
                line,
                start: at,
                end: at + 2,
            });
        } else {
            out.push(Token {
                text: c.to_string(),
                line,
                start: at,
                end: at + c.len_utf8(),
            });
        }
    }
    out
}

/// Words that start an item (rather than a field, a match arm or an expression).
const ITEM_WORDS: [&str; 16] = [
    "pub",
    "mod",
    "fn",
    "use",
    "impl",
    "struct",
    "enum",
    "const",
    "static",
    "type",
    "trait",
    "unsafe",
    "extern",
    "async",
    "let",
    "macro_rules",
];

/// Blanked code without its `#[cfg(test)]` items, blanked too (lines kept), and the names
/// of the modules declared as test-only files (`#[cfg(test)] mod fuzz;`).
fn without_test_items(code: &str) -> (String, Vec<String>) {
    let toks = tokens(code);
    let mut cut: Vec<(usize, usize)> = Vec::new();
    let mut test_files = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        let Some(after) = attribute_end(&toks, i) else {
            i += 1;
            continue;
        };
        let attribute: String = toks[i..after].iter().map(|t| t.text.as_str()).collect();
        if attribute != "#[cfg(test)]" {
            i = after;
            continue;
        }
        // Further attributes belong to the same item.
        let mut first = after;
        while let Some(end) = attribute_end(&toks, first) {
            first = end;
        }
        let item = toks
            .get(first)
            .is_some_and(|t| ITEM_WORDS.contains(&t.text.as_str()));
        let end = item_end(&toks, first, item);
        if toks.get(first).is_some_and(|t| t.text == "mod")
            && toks.get(first + 2).is_some_and(|t| t.text == ";")
        {
            test_files.push(toks[first + 1].text.clone());
        }
        let last = end.saturating_sub(1).max(first).min(toks.len() - 1);
        cut.push((toks[i].start, toks[last].end));
        i = end;
    }
    let mut out = String::with_capacity(code.len());
    let mut from = 0;
    for (start, end) in cut {
        out.push_str(&code[from..start]);
        out.extend(
            code[start..end]
                .chars()
                .map(|c| if c == '\n' { '\n' } else { ' ' }),
        );
        from = end;
    }
    out.push_str(&code[from..]);
    (out, test_files)
}

/// The token after an attribute (`#[…]`, `#![…]`) starting at `at`, if one does.
fn attribute_end(toks: &[Token], at: usize) -> Option<usize> {
    let mut i = at;
    if toks.get(i)?.text != "#" {
        return None;
    }
    i += 1;
    if toks.get(i)?.text == "!" {
        i += 1;
    }
    if toks.get(i)?.text != "[" {
        return None;
    }
    let mut depth = 0;
    while let Some(t) = toks.get(i) {
        match t.text.as_str() {
            "[" => depth += 1,
            "]" => {
                depth -= 1;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// The token after the item (or, when `item` is false, the field, arm or statement)
/// starting at `first`: after its `;` or its closing brace at its own depth; never past
/// the brace that closes what encloses it.
fn item_end(toks: &[Token], first: usize, item: bool) -> usize {
    let mut depth = 0i32;
    let mut i = first;
    while let Some(t) = toks.get(i) {
        match t.text.as_str() {
            "(" | "[" | "{" => depth += 1,
            ")" | "]" | "}" => {
                depth -= 1;
                if depth < 0 {
                    return i;
                }
                if depth == 0 && t.text == "}" {
                    // `use a::{b};` and `const X: T = T { … };` go on to their `;`.
                    return if toks.get(i + 1).is_some_and(|n| n.text == ";") {
                        i + 2
                    } else {
                        i + 1
                    };
                }
            }
            ";" if depth == 0 => return i + 1,
            "," if depth == 0 && !item => return i + 1,
            _ => {}
        }
        i += 1;
    }
    toks.len()
}

/// Every module path that `code` (blanked, test items gone) of module `module` names from
/// `crate::`, `super::` or `self::`, resolved from the crate root, with the token it
/// starts at. Inline modules (`mod exact { … }`) are followed, so that their `super` is
/// theirs; `mod`s found are added to `modules`.
fn references(
    code: &str,
    module: &[String],
    modules: &mut BTreeSet<ModulePath>,
) -> Vec<(ModulePath, Token, String)> {
    let toks = tokens(code);
    let mut out = Vec::new();
    // The inline modules we are in, each with the brace depth its body opened at.
    let mut inline: Vec<(String, i32)> = Vec::new();
    let mut depth = 0i32;
    let current = |inline: &[(String, i32)]| -> ModulePath {
        let mut path = module.to_vec();
        path.extend(inline.iter().map(|(name, _)| name.clone()));
        path
    };
    let mut i = 0;
    while i < toks.len() {
        let t = &toks[i];
        match t.text.as_str() {
            "{" => depth += 1,
            "}" => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth -= 1;
            }
            "mod" => {
                if let (Some(name), Some(open)) = (toks.get(i + 1), toks.get(i + 2)) {
                    let mut path = current(&inline);
                    path.push(name.text.clone());
                    modules.insert(path);
                    if open.text == "{" {
                        depth += 1;
                        inline.push((name.text.clone(), depth));
                        i += 3;
                        continue;
                    }
                }
            }
            "crate" | "super" | "self"
                if toks.get(i + 1).is_some_and(|n| n.text == "::")
                    && (i == 0 || toks[i - 1].text != "::") =>
            {
                let base = current(&inline);
                let (paths, next) = use_tree(&toks, i, Vec::new());
                for (written, relative) in paths {
                    if let Some(path) = resolve(&base, &relative) {
                        out.push((path, t.clone(), written));
                    }
                }
                i = next.max(i + 1);
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// The paths of a `use` tree or a path expression starting at `at` (`a::b::{c, d::{e}}`
/// gives `a::b::c` and `a::b::d::e`; `self` in a group and `*` give the prefix), each as
/// written and as its segments; and the token after it.
fn use_tree(toks: &[Token], at: usize, prefix: Vec<String>) -> (Vec<(String, Vec<String>)>, usize) {
    let mut path = prefix;
    let mut i = at;
    loop {
        match toks.get(i).map(|t| t.text.as_str()) {
            Some("{") => {
                let mut out = Vec::new();
                i += 1;
                loop {
                    match toks.get(i).map(|t| t.text.as_str()) {
                        Some("}") => return (out, i + 1),
                        Some(",") => i += 1,
                        Some(_) => {
                            let (paths, next) = use_tree(toks, i, path.clone());
                            out.extend(paths);
                            i = next.max(i + 1);
                        }
                        None => return (out, i),
                    }
                }
            }
            Some("*") => return (vec![(path.join("::"), path)], i + 1),
            Some(word) if is_identifier(word) => {
                // `self` in a group (`use crate::report::{self, html}`) is the prefix.
                if word != "self" || path.is_empty() {
                    path.push(word.to_string());
                }
                if toks.get(i + 1).is_some_and(|t| t.text == "::") {
                    i += 2;
                } else {
                    return (vec![(path.join("::"), path)], i + 1);
                }
            }
            _ => return (vec![(path.join("::"), path)], i),
        }
    }
}

fn is_identifier(word: &str) -> bool {
    word.chars().all(|c| c.is_alphanumeric() || c == '_')
        && word.chars().next().is_some_and(|c| !c.is_ascii_digit())
}

/// A path written in module `base` (`crate::…`, `super::…`, `self::…`) from the crate
/// root; `None` when it climbs above the root.
fn resolve(base: &[String], written: &[String]) -> Option<ModulePath> {
    let mut segments = written.iter();
    let mut path: ModulePath = match segments.next().map(String::as_str) {
        Some("crate") => Vec::new(),
        Some("self") => base.to_vec(),
        Some("super") => base[..base.len().checked_sub(1)?].to_vec(),
        _ => return None,
    };
    let mut rest = segments.peekable();
    while rest.peek().is_some_and(|s| *s == "super") {
        path.pop()?;
        rest.next();
    }
    path.extend(rest.cloned());
    Some(path)
}

/// The module a file of `src/` holds: `report/compare.rs` → `report::compare`,
/// `report/mod.rs` → `report`, `main.rs` and `lib.rs` → the crate root.
fn module_of(relative: &str) -> ModulePath {
    let relative = relative.strip_suffix(".rs").unwrap_or(relative);
    let mut path: ModulePath = relative.split('/').map(String::from).collect();
    if path.last().is_some_and(|last| last == "mod")
        || (path.len() == 1 && (path[0] == "main" || path[0] == "lib"))
    {
        path.pop();
    }
    path
}

/// The import graphs of the files given as (path under `src/` with `/`, text).
fn graphs_of(files: &[(String, String)]) -> Graphs {
    let mut modules: BTreeSet<ModulePath> = BTreeSet::new();
    let mut test_only: BTreeSet<ModulePath> = BTreeSet::new();
    let mut code: Vec<(String, ModulePath, String)> = Vec::new();
    for (relative, text) in files {
        let module = module_of(relative);
        let (kept, test_files) = without_test_items(&blank_comments_and_literals(text));
        for name in test_files {
            let mut path = module.clone();
            path.push(name);
            test_only.insert(path);
        }
        modules.insert(module.clone());
        code.push((relative.clone(), module, kept));
    }
    let mut graphs = Graphs::new();
    let mut named = Vec::new();
    for (relative, module, kept) in &code {
        // A file declared `#[cfg(test)] mod x;` is test code, and so is what it declares.
        if test_only.iter().any(|t| module.starts_with(t)) {
            continue;
        }
        for (path, token, written) in references(kept, module, &mut modules) {
            named.push((relative.clone(), module.clone(), path, token, written));
        }
    }
    for (file, from, to, token, written) in named {
        // The modules meet below their deepest common parent: there, the child on one
        // side names the child on the other.
        let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
        if from.len() <= common || to.len() <= common {
            continue; // a module naming its own items, a parent's or a child's
        }
        let parent = from[..common].to_vec();
        let mut child = parent.clone();
        child.push(to[common].clone());
        if !modules.contains(&child) {
            continue; // an item of the parent, not a module
        }
        graphs
            .entry(parent)
            .or_default()
            .entry(from[common].clone())
            .or_default()
            .entry(to[common].clone())
            .or_insert(Import {
                file,
                line: token.line,
                path: written,
            });
    }
    graphs
}

/// Every `.rs` file under `src` as (path under it with `/`, text).
fn read_tree(src: &Path) -> Vec<(String, String)> {
    let mut files = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src/") {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let relative = path.strip_prefix(src).expect("under src/");
                let relative = relative
                    .components()
                    .map(|c| c.as_os_str().to_str().expect("UTF-8 path"))
                    .collect::<Vec<_>>()
                    .join("/");
                files.push((
                    relative,
                    std::fs::read_to_string(&path).expect("read a source file"),
                ));
            }
        }
    }
    files.sort();
    files
}

/// The first cycle of one parent's graph, as the modules along it (the first repeated at
/// the end), if any.
fn find_cycle(graph: &BTreeMap<String, BTreeMap<String, Import>>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum State {
        New,
        OnPath,
        Done,
    }
    fn visit<'g>(
        node: &'g str,
        graph: &'g BTreeMap<String, BTreeMap<String, Import>>,
        state: &mut BTreeMap<&'g str, State>,
        path: &mut Vec<&'g str>,
    ) -> Option<Vec<String>> {
        state.insert(node, State::OnPath);
        path.push(node);
        for next in graph.get(node).into_iter().flat_map(BTreeMap::keys) {
            match state.get(next.as_str()).copied().unwrap_or(State::New) {
                State::OnPath => {
                    let from = path.iter().position(|n| n == next).expect("on the path");
                    let mut cycle: Vec<String> =
                        path[from..].iter().map(|s| s.to_string()).collect();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                State::New => {
                    if let Some(cycle) = visit(next, graph, state, path) {
                        return Some(cycle);
                    }
                }
                State::Done => {}
            }
        }
        path.pop();
        state.insert(node, State::Done);
        None
    }
    let mut state = BTreeMap::new();
    for node in graph.keys() {
        if state.get(node.as_str()).copied().unwrap_or(State::New) == State::New {
            if let Some(cycle) = visit(node, graph, &mut state, &mut Vec::new()) {
                return Some(cycle);
            }
        }
    }
    None
}

/// Each cycle left once the `allowed` imports are taken out, one line per import along it.
fn cycles(graphs: &Graphs, allowed: &[(&str, &str, &str)]) -> Vec<String> {
    let mut found = Vec::new();
    for (parent, graph) in graphs {
        let mut graph = graph.clone();
        for (from, to, _) in allowed {
            let (from, to): (ModulePath, ModulePath) = (
                from.split("::").map(String::from).collect(),
                to.split("::").map(String::from).collect(),
            );
            let (Some((from_child, from_parent)), Some((to_child, to_parent))) =
                (from.split_last(), to.split_last())
            else {
                continue;
            };
            if from_parent == parent.as_slice() && to_parent == parent.as_slice() {
                if let Some(edges) = graph.get_mut(from_child) {
                    edges.remove(to_child);
                }
            }
        }
        if let Some(cycle) = find_cycle(&graph) {
            let name = |m: &str| {
                let mut path = parent.clone();
                path.push(m.to_string());
                path.join("::")
            };
            let steps: Vec<String> = cycle
                .windows(2)
                .map(|pair| {
                    let import = &graph[&pair[0]][&pair[1]];
                    format!(
                        "  {} → {}: src/{}:{} names {}",
                        name(&pair[0]),
                        name(&pair[1]),
                        import.file,
                        import.line,
                        import.path
                    )
                })
                .collect();
            found.push(format!(
                "{}\n{}",
                cycle
                    .iter()
                    .map(|m| name(m))
                    .collect::<Vec<_>>()
                    .join(" → "),
                steps.join("\n")
            ));
        }
    }
    found
}

#[test]
fn modules_import_each_other_without_a_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graphs = graphs_of(&read_tree(&src));
    let top = graphs.get(&Vec::new()).expect("the top-level graph");
    assert!(
        top.len() > 10 && top.contains_key("ingest") && top.contains_key("report"),
        "the module graph was not read: {top:?}"
    );
    let found = cycles(&graphs, ALLOWED);
    assert!(
        found.is_empty(),
        "import cycles:\n{}\nmove what both need into the lower module (see docs/architecture.md, Modules)",
        found.join("\n")
    );
}

#[test]
fn literals_and_comments_are_blanked_with_their_lines_kept() {
    let text = "let a = \"{ crate::x }\"; // crate::y {\nlet b = '{'; let c: &'static str = r#\"}\"#;\n/* a /* nested */ crate::z } */ let d = '\\u{7b}';\n";
    let blanked = blank_comments_and_literals(text);
    assert_eq!(blanked.lines().count(), text.lines().count());
    assert!(!blanked.contains("crate::"), "{blanked}");
    assert!(!blanked.contains(['{', '}']), "{blanked}");
    assert!(
        blanked.contains("&'static str"),
        "a lifetime is code: {blanked}"
    );
    assert!(blanked.contains("let d"), "{blanked}");
}

#[test]
fn only_test_items_are_skipped_and_code_after_them_is_read() {
    // A file whose test helper comes first, as in stats.rs: what follows it is code.
    let file = "\
use crate::model::Event;

#[cfg(test)]
pub fn helper() -> &'static str { \"} still the helper\" }

#[cfg(test)]
use crate::summary::Summary;

pub fn after_the_helper() { crate::report::draw(); }

struct Fields {
    #[cfg(test)]
    probe: crate::gate::Gate,
    kept: crate::rules::Rules,
}

#[cfg(test)]
#[allow(dead_code)]
mod tests {
    use crate::analysis::Analysis;
    fn nested() { let _ = '}'; }
}

#[cfg(test)]
mod fuzz;

use crate::{partial::{merge, format}, stats};
";
    let (kept, test_files) = without_test_items(&blank_comments_and_literals(file));
    let mut modules = BTreeSet::new();
    let named: BTreeSet<String> = references(&kept, &["stats".to_string()], &mut modules)
        .into_iter()
        .map(|(path, _, _)| path[0].clone())
        .collect();
    let expected: BTreeSet<String> = ["model", "report", "rules", "partial", "stats"]
        .map(String::from)
        .into();
    assert_eq!(named, expected);
    assert_eq!(test_files, ["fuzz"]);
    assert_eq!(
        kept.lines().count(),
        file.lines().count(),
        "lines keep their numbers"
    );
}

#[test]
fn a_cycle_is_found_among_top_level_modules_and_among_siblings() {
    let files = |list: &[(&str, &str)]| -> Vec<(String, String)> {
        list.iter()
            .map(|(p, t)| (p.to_string(), t.to_string()))
            .collect()
    };
    // Top level: rules → model, and model → rules past a test helper.
    let top = files(&[
        ("main.rs", "mod model; mod rules;"),
        ("rules.rs", "use crate::model::Event;"),
        (
            "model.rs",
            "#[cfg(test)]\nfn helper() {}\npub fn f() { crate::rules::check(); }",
        ),
    ]);
    let found = cycles(&graphs_of(&top), &[]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("model → rules → model"),
        "{}",
        found[0]
    );
    assert!(
        found[0].contains("src/model.rs:3 names crate::rules::check"),
        "{}",
        found[0]
    );
    // The same model with the helper's use inside its test module: no cycle.
    let layered = files(&[
        ("rules.rs", "use crate::model::Event;"),
        ("model.rs", "#[cfg(test)]\nmod tests { use crate::rules; }"),
    ]);
    assert!(cycles(&graphs_of(&layered), &[]).is_empty());
    // Siblings under one parent, through `super::` and `crate::`; an item of the parent
    // (`super::Style`) and a module's own path make no edge.
    let siblings = files(&[
        ("report/mod.rs", "mod compare; mod html; pub struct Style;"),
        ("report/compare.rs", "use super::{html, Style};"),
        (
            "report/html.rs",
            "fn f() { crate::report::compare::sections(); self::g(); }",
        ),
    ]);
    let graphs = graphs_of(&siblings);
    let found = cycles(&graphs, &[]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("report::compare → report::html → report::compare"),
        "{}",
        found[0]
    );
    assert!(cycles(&graphs, &[("report::html", "report::compare", "test")]).is_empty());
    // Inline modules have `super` of their own; a test-only file is skipped.
    let inline = files(&[
        ("partial/mod.rs", "pub mod format; pub mod merge;"),
        (
            "partial/format.rs",
            "pub mod exact { use super::super::merge::X; }",
        ),
        ("partial/merge.rs", "use super::format;"),
        ("main.rs", "#[cfg(test)]\nmod fuzz;"),
        ("fuzz.rs", "use crate::partial;"),
    ]);
    let graphs = graphs_of(&inline);
    let found = cycles(&graphs, &[]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("partial::format → partial::merge → partial::format"),
        "{}",
        found[0]
    );
    assert!(
        graphs
            .values()
            .all(|graph| graph.values().all(|edges| !edges.contains_key("fuzz"))),
        "{graphs:?}"
    );
}
