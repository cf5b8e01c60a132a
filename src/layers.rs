//! The modules' layers, lowest first, and a test that holds the code to them: a module
//! uses only modules of lower layers, never one of its own layer or above. So the read
//! path and the upstream never import each other (both stand on `source`), and no
//! change can slip a cycle in.

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
