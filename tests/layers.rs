//! The modules form layers: model and rules → ingest → the per-operation stages →
//! analysis → summary → report and gate → config → main (docs/architecture.md). This test
//! reads `src/`, collects which top-level module names which other one (`use crate::x`,
//! `crate::x::…`, `use crate::{x, y}`), and fails on any cycle among them, printing it.
//! Test modules (everything from a file's first `#[cfg(test)]`) and comments are left out:
//! a test may reach for a helper in any module without making the layers circular.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Graph = BTreeMap<String, BTreeSet<String>>;

/// The top-level module a file of `src/` belongs to: `src/ingest/spans/hop.rs` → `ingest`.
fn top_module(relative: &Path) -> Option<String> {
    let first = relative.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    // The crate root declares the modules; it is above every layer.
    (name != "main" && name != "lib").then(|| name.to_string())
}

/// The code of a file without its test modules and comments.
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]") {
        Some(at) => &text[..at],
        None => text,
    };
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The top-level modules a piece of code names through `crate::`.
fn dependencies(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // `use crate::{a::X, b}`: each path's first segment.
            let group = &group[..group.find('}').unwrap_or(group.len())];
            for part in group.split(',') {
                let name = ident(part.trim());
                if !name.is_empty() {
                    out.insert(name);
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                out.insert(name);
            }
        }
    }
    out
}

fn module_graph(src: &Path) -> Graph {
    let mut graph = Graph::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src/") {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let relative = path.strip_prefix(src).expect("under src/");
            let Some(module) = top_module(relative) else {
                continue;
            };
            let text = std::fs::read_to_string(&path).expect("read a source file");
            let deps = dependencies(&code_of(&text));
            graph
                .entry(module.clone())
                .or_default()
                .extend(deps.into_iter().filter(|d| *d != module));
        }
    }
    // Only edges between modules of the crate (not `crate::` inside a string, say).
    let names: BTreeSet<String> = graph.keys().cloned().collect();
    for deps in graph.values_mut() {
        deps.retain(|d| names.contains(d));
    }
    graph
}

/// A cycle of the graph as the modules along it (the first repeated at the end), if any.
fn find_cycle(graph: &Graph) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum State {
        New,
        OnPath,
        Done,
    }
    fn visit<'g>(
        node: &'g str,
        graph: &'g Graph,
        state: &mut BTreeMap<&'g str, State>,
        path: &mut Vec<&'g str>,
    ) -> Option<Vec<String>> {
        state.insert(node, State::OnPath);
        path.push(node);
        for next in graph.get(node).into_iter().flatten() {
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

#[test]
fn top_level_modules_import_each_other_without_a_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = module_graph(&src);
    assert!(
        graph.len() > 10 && graph.contains_key("ingest") && graph.contains_key("rules"),
        "the module graph was not read: {graph:?}"
    );
    if let Some(cycle) = find_cycle(&graph) {
        panic!(
            "import cycle among the top-level modules: {}\nmove the type both need into the lower module (see docs/architecture.md, Modules)",
            cycle.join(" → ")
        );
    }
}

#[test]
fn the_cycle_check_finds_a_cycle_and_reads_every_import_form() {
    let deps = dependencies(&code_of(
        "use crate::rules::HopOrder;\nuse crate::{model::Event, summary};\nfn f() { crate::profile::note(\"x\"); }\n// crate::commented\n#[cfg(test)]\nmod tests { use crate::report; }",
    ));
    let expected: BTreeSet<String> = ["rules", "model", "summary", "profile"]
        .map(String::from)
        .into();
    assert_eq!(deps, expected);
    let graph: Graph = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec![]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
    .collect();
    assert_eq!(
        find_cycle(&graph),
        Some(["a", "b", "c", "a"].map(String::from).to_vec())
    );
    let mut layered = graph.clone();
    layered.get_mut("c").unwrap().clear();
    assert_eq!(find_cycle(&layered), None);
}
