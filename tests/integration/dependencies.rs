//! The dependency tree holds no OpenSSL: TLS is rustls on both sides, and the trust roots
//! are loaded by Portico rather than through `openssl-probe`.

#[test]
fn no_crate_in_the_dependency_tree_is_openssl() {
    let output = std::process::Command::new(env!("CARGO"))
        .args(["tree", "--workspace", "--offline", "--prefix", "none"])
        .args(["--edges", "normal,build,dev"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo tree");
    let tree = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(tree.contains("rustls v0.23"), "the tree was read: {tree}");
    let openssl: Vec<&str> = tree
        .lines()
        .filter(|line| line.to_ascii_lowercase().contains("openssl"))
        .collect();
    assert!(openssl.is_empty(), "OpenSSL crates: {openssl:?}");
}
