//! The modules' layers, lowest first, and a test that holds the code to them: a module
//! uses only modules of lower layers, never one of its own layer or above. So the read
//! path and the upstream never import each other (both stand on `source`), and no
//! change can slip a cycle in. Inside the largest modules the files are layered the same
//! way ([`FILE_LAYERS`]).

/// Each module's layer. A module missing here fails the test: place it when adding it.
const LAYERS: &[(&str, u8)] = &[
    ("types", 0),
    ("object", 0),
    ("config", 0),
    ("shutdown", 0),
    ("telemetry", 1),
    ("rules", 1),
    ("reload", 1),
    ("checksum", 1),
    ("source", 2),
    ("tenant", 1),
    ("buffers", 1),
    ("fill_threads", 1),
    ("budget", 2),
    ("tls", 2),
    ("cache", 2),
    ("auth", 2),
    ("listing", 3),
    ("upstream", 3),
    ("read", 3),
    ("warm", 4),
    ("cluster", 5),
    ("events", 6),
    ("admin", 7),
    ("api", 7),
    ("app", 8),
    ("fuzzing", 8),
];

/// Inside these modules, each file's layer: a file uses only files of lower layers of its
/// module, through `super::`, `crate::<module>::` or a name `mod.rs` imports from a
/// file. `mod.rs` itself declares the files, imports the module's face from them and
/// holds the types they share; tests may use any file. A file missing here fails the
/// test: place it when adding it. What the test cannot see is a method a file adds to a
/// type `mod.rs` holds (`impl BlockCache` in `cache/pieces.rs`, called in `cache/open.rs`):
/// such a caller is placed above the file by hand.
const FILE_LAYERS: &[(&str, &[(&str, u8)])] = &[
    (
        "read",
        &[
            ("fills", 0),
            ("hedge", 0),
            ("claims", 0),
            ("coalesce", 0),
            ("generations", 0),
            ("integrity", 0),
            ("stream", 1),
            ("body", 1),
            ("verify", 1),
            ("discovered", 2),
            ("fetch", 2),
            ("uncached", 2),
            ("block", 3),
            ("metadata", 3),
            ("status", 3),
            ("lookup", 4),
            ("prefetch", 4),
            ("manage", 4),
            ("writes", 4),
            ("path", 5),
            ("get", 6),
            ("actions", 6),
            ("peers", 6),
        ],
    ),
    (
        "cache",
        &[
            ("codec", 0),
            ("layout", 0),
            ("kept", 0),
            ("memory", 0),
            ("purges", 0),
            ("tier", 0),
            ("meta", 1),
            ("disk", 1),
            ("key", 2),
            ("device", 2),
            ("error", 2),
            ("writer", 3),
            ("doorkeeper", 3),
            ("fetching", 3),
            ("pieces", 4),
            ("open", 5),
        ],
    ),
];

/// The code of a source file without its comment lines and its inline test module.
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests {") {
        Some(at) => &text[..at],
        None => text,
    };
    text.lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first names of the paths `code` names after each `prefix`: `prefix::a::B` gives
/// `a`, and `prefix::{a::B, C}` gives `a` and `C`.
fn names_after(code: &str, prefix: &str) -> Vec<String> {
    let is_name = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut names = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find(prefix) {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + prefix.len()..];
        // `super::super::x` is not `super::x`; `my_crate::` is not `crate::`.
        if before.is_some_and(|c| is_name(c) || c == ':') {
            continue;
        }
        // A path further up (`super::super::` where `super::` is asked) names no file here.
        if rest.starts_with("super::") {
            rest = rest.trim_start_matches("super::");
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut entry = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        names.push(std::mem::take(&mut entry));
                        continue;
                    }
                    _ => {}
                }
                entry.push(c);
            }
            names.push(entry);
        } else if rest.starts_with('*') {
            names.push("*".to_owned());
        } else {
            names.push(rest.chars().take_while(|c| is_name(*c)).collect());
        }
    }
    names
        .into_iter()
        .map(|name| {
            let name = name.trim();
            name.split("::").next().unwrap_or(name).trim().to_owned()
        })
        .filter(|name| !name.is_empty() && name != "self")
        .collect()
}

/// The first names of the paths into `module` that `code`, a file inside it, names: after
/// `super::` (`super::super::` when `nested`: it lies in a directory of its own file, as
/// `read/integrity/learn.rs` does) and after `crate::<module>::`.
fn module_names(code: &str, module: &str, nested: bool) -> Vec<String> {
    let parent = if nested { "super::super::" } else { "super::" };
    let mut names = names_after(code, parent);
    names.extend(names_after(code, &format!("crate::{module}::")));
    names
}

/// The files of a module that `names` (see [`module_names`]) stand for: a file's own
/// name, or one `imported` maps (each name `mod.rs` imports from a file, to that file).
fn used_files(
    names: Vec<String>,
    files: &[(&str, u8)],
    imported: &[(String, String)],
) -> Vec<String> {
    let mut used = Vec::new();
    for name in names {
        let file = if files.iter().any(|(file, _)| *file == name) {
            Some(name)
        } else {
            imported
                .iter()
                .find(|(imported, _)| *imported == name)
                .map(|(_, file)| file.clone())
        };
        if let Some(file) = file
            && !used.contains(&file)
        {
            used.push(file);
        }
    }
    used
}

/// `line` without a leading visibility (`pub`, `pub(crate)`, `pub(in …)`).
fn without_visibility(line: &str) -> &str {
    let line = line.trim_start();
    let Some(rest) = line.strip_prefix("pub") else {
        return line;
    };
    let rest = match rest.strip_prefix('(') {
        Some(inside) => inside.split_once(')').map_or(rest, |(_, after)| after),
        None => rest,
    };
    if rest.starts_with(char::is_whitespace) {
        rest.trim_start()
    } else {
        line
    }
}

/// The paths of the `use` declarations in `code`, each without `use` and its `;`.
fn use_paths(code: &str) -> Vec<&str> {
    let mut paths = Vec::new();
    let mut at = 0;
    for line in code.split_inclusive('\n') {
        let start = at;
        at += line.len();
        let Some(path) = without_visibility(line).strip_prefix("use ") else {
            continue;
        };
        // `path` is the end of `line`.
        let from = start + line.len() - path.len();
        if let Some(end) = code[from..].find(';') {
            paths.push(code[from..from + end].trim());
        }
    }
    paths
}

/// Each name `mod_rs` imports from one of `files`, with that file; a glob import from a
/// file is `*`.
fn imported_names(mod_rs: &str, files: &[(&str, u8)]) -> Vec<(String, String)> {
    let code = code_of(mod_rs);
    let mut imported = Vec::new();
    for path in use_paths(&code) {
        let path = path.trim_start_matches("self::");
        let Some((file, names)) = path.split_once("::") else {
            continue;
        };
        if !files.iter().any(|(known, _)| *known == file) {
            continue;
        }
        // The leaves of the tree: `{A, b::{C, D as E}, *}` imports A, C, E and a glob.
        for name in names.split(['{', '}', ',']) {
            let name = name.trim();
            let name = name.rsplit(" as ").next().unwrap_or(name);
            let name = name.rsplit("::").next().unwrap_or(name).trim();
            if !name.is_empty() && name != "self" {
                imported.push((name.to_owned(), file.to_owned()));
            }
        }
    }
    imported
}

fn layer(module: &str) -> Option<u8> {
    LAYERS
        .iter()
        .find(|(name, _)| *name == module)
        .map(|(_, layer)| *layer)
}

/// The `crate::` modules `code` names outside comments.
fn used_modules(code: &str) -> Vec<String> {
    let mut used = Vec::new();
    for line in code.lines() {
        let line = line.trim_start();
        if line.starts_with("//") {
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            if !name.is_empty() && !used.contains(&name) {
                used.push(name);
            }
        }
    }
    used
}

/// Every `.rs` file under `path` (or `path` itself).
fn sources(path: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    if path.is_dir() {
        let mut entries: Vec<_> = std::fs::read_dir(path)
            .expect("a source directory")
            .map(|entry| entry.expect("a directory entry").path())
            .collect();
        entries.sort();
        for entry in entries {
            sources(&entry, out);
        }
    } else if path.is_file() && path.extension().is_some_and(|extension| extension == "rs") {
        out.push(path.to_owned());
    }
}

#[test]
fn every_module_uses_only_modules_below_it() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut broken = Vec::new();
    for (module, own) in LAYERS {
        let mut files = Vec::new();
        sources(&src.join(module), &mut files);
        sources(&src.join(format!("{module}.rs")), &mut files);
        assert!(!files.is_empty(), "no source for module {module}");
        for file in files {
            let code = std::fs::read_to_string(&file)
                .unwrap_or_else(|error| panic!("{}: {error}", file.display()));
            for used in used_modules(&code) {
                if used == *module {
                    continue;
                }
                match layer(&used) {
                    Some(theirs) if theirs < *own => {}
                    Some(theirs) => broken.push(format!(
                        "{} uses crate::{used} (layer {theirs}, not below {module}'s {own})",
                        file.display()
                    )),
                    None => broken.push(format!(
                        "{} uses crate::{used}, which has no layer",
                        file.display()
                    )),
                }
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn every_file_uses_only_files_below_it_in_its_module() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut broken = Vec::new();
    for (module, files) in FILE_LAYERS {
        let directory = src.join(module);
        let mod_rs =
            std::fs::read_to_string(directory.join("mod.rs")).expect("the module's mod.rs");
        let imported = imported_names(&mod_rs, files);
        for (name, file) in &imported {
            if name == "*" {
                broken.push(format!(
                    "{module}/mod.rs imports all of {file}.rs: name what it imports"
                ));
            }
        }
        for (file, own) in *files {
            let mut sources_of_file = Vec::new();
            sources(&directory.join(format!("{file}.rs")), &mut sources_of_file);
            assert!(
                !sources_of_file.is_empty(),
                "no source for {module}/{file}.rs"
            );
            let mut nested = Vec::new();
            sources(&directory.join(file), &mut nested);
            let nested = nested.into_iter().map(|path| (path, true));
            let all = sources_of_file
                .into_iter()
                .map(|path| (path, false))
                .chain(nested);
            for (path, nested) in all {
                let is_test = path.file_stem().is_some_and(|stem| stem == "tests")
                    || path.components().any(|part| part.as_os_str() == "tests");
                if is_test {
                    continue;
                }
                let below = path
                    .strip_prefix(directory.join(file))
                    .map(|rest| rest.components().count());
                if below.is_ok_and(|depth| depth > 1) {
                    broken.push(format!(
                        "{} lies deeper than this test reads `super::`: move it up a level or teach the test",
                        path.display()
                    ));
                }
                let text = std::fs::read_to_string(&path)
                    .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
                let code = code_of(&text);
                let named = module_names(&code, module, nested);
                if named.iter().any(|name| name == "*") {
                    broken.push(format!(
                        "{} imports all of {module}: name what it uses, so its layer can be checked",
                        path.display()
                    ));
                }
                for used in used_files(named, files, &imported) {
                    if used == *file {
                        continue;
                    }
                    let theirs = files
                        .iter()
                        .find(|(name, _)| *name == used)
                        .map(|(_, layer)| *layer);
                    if theirs.is_some_and(|theirs| theirs >= *own) {
                        broken.push(format!(
                            "{} uses {module}/{used}.rs (layer {}, not below {file}'s {own})",
                            path.display(),
                            theirs.unwrap_or_default()
                        ));
                    }
                }
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn every_file_of_a_layered_module_has_a_layer() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for (module, files) in FILE_LAYERS {
        let mod_rs = std::fs::read_to_string(src.join(module).join("mod.rs")).expect("mod.rs");
        for line in mod_rs.lines() {
            let declared = without_visibility(line)
                .strip_prefix("mod ")
                .and_then(|rest| rest.strip_suffix(';'));
            if let Some(file) = declared
                && file != "tests"
            {
                assert!(
                    files.iter().any(|(name, _)| *name == file),
                    "{module}/{file}.rs has no layer"
                );
            }
        }
    }
}

#[test]
fn a_use_of_a_file_above_is_found_however_it_is_written() {
    let files: &[(&str, u8)] = &[("low", 0), ("high", 1), ("face", 1)];
    let imported = vec![("Face".to_owned(), "face".to_owned())];
    let code = "use super::{Shared, high::{A, B}};\nuse super::super::other::X;\nlet y = crate::read::low::f();\nlet z: super::Face;";
    assert_eq!(
        used_files(module_names(code, "read", false), files, &imported),
        ["high", "face", "low"]
    );
    // In a file of a file's own directory, `super::` is that file.
    assert_eq!(
        used_files(
            module_names("use super::high;\nuse super::super::low;", "read", true),
            files,
            &imported
        ),
        ["low"]
    );
    let mod_rs = "mod high;\npub use face::{Face, Other as Renamed};\nstruct S {}\nuse low::Thing;\n// use high::Commented;\n#[cfg(unix)]\npub(in crate::read) use high::{deep::Deep, *};";
    assert_eq!(
        imported_names(mod_rs, files),
        [
            ("Face".to_owned(), "face".to_owned()),
            ("Renamed".to_owned(), "face".to_owned()),
            ("Thing".to_owned(), "low".to_owned()),
            ("Deep".to_owned(), "high".to_owned()),
            ("*".to_owned(), "high".to_owned())
        ]
    );
    assert_eq!(names_after("use super::*;", "super::"), ["*"]);
    assert!(names_after("use super::super::get;", "super::").is_empty());
    assert_eq!(without_visibility("pub(in crate::read) mod x;"), "mod x;");
    assert_eq!(without_visibility("public_thing"), "public_thing");
}

#[test]
fn every_module_of_the_crate_has_a_layer() {
    let lib = include_str!("lib.rs");
    for line in lib.lines() {
        if let Some(module) = line
            .strip_prefix("pub mod ")
            .and_then(|rest| rest.strip_suffix(';'))
        {
            assert!(layer(module).is_some(), "module {module} has no layer");
        }
    }
}

#[test]
fn a_use_of_a_module_above_is_found() {
    let code =
        "// crate::api in a comment\nuse crate::read::ReadPath;\nlet x = crate::api::route();";
    assert_eq!(used_modules(code), ["read", "api"]);
}
