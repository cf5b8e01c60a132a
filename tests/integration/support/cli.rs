//! The command-line S3 tools the tests drive, found where `make tools` put them.

use portico_testkit::minio::{ACCESS_KEY, SECRET_KEY};

/// A tool's path from the environment the Makefile sets, else the usual name.
pub fn tool(variable: &str, default: &str) -> String {
    std::env::var(variable).unwrap_or_else(|_| default.to_owned())
}

/// Runs a command to completion; panics with its output unless it succeeds.
pub async fn run(program: &str, args: &[&str], env: &[(&str, &str)]) -> String {
    match try_run(program, args, env).await {
        Ok(stdout) => stdout,
        Err(failure) => panic!("{failure}"),
    }
}

/// Runs a command to completion: its stdout, or a report of the failure with its output.
pub async fn try_run(program: &str, args: &[&str], env: &[(&str, &str)]) -> Result<String, String> {
    let output = tokio::process::Command::new(program)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .await
        .unwrap_or_else(|error| panic!("cannot run {program} (see `make tools`): {error}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        return Err(format!(
            "{program} {args:?} failed ({}):\n{stdout}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(stdout)
}

/// The aws CLI v2 against one endpoint, with the rig's credentials and no user config.
pub struct AwsCli {
    endpoint: String,
    program: String,
    /// Trust this PEM bundle for TLS (`--ca-bundle`).
    pub ca_bundle: Option<String>,
}

impl AwsCli {
    pub fn new(endpoint: &str) -> Self {
        Self {
            endpoint: endpoint.to_owned(),
            program: tool("PORTICO_AWS_CLI", "/usr/bin/aws"),
            ca_bundle: None,
        }
    }

    /// Runs `aws <args>`; panics unless it succeeds.
    pub async fn run(&self, args: &[&str]) -> String {
        self.try_run(args)
            .await
            .unwrap_or_else(|failure| panic!("{failure}"))
    }

    pub async fn try_run(&self, args: &[&str]) -> Result<String, String> {
        let (command, rest) = args.split_first().expect("a command");
        let mut argv: Vec<&str> = vec!["--endpoint-url", &self.endpoint];
        if let Some(bundle) = &self.ca_bundle {
            argv.extend(["--ca-bundle", bundle]);
        }
        argv.push(command);
        argv.extend_from_slice(rest);
        if *command == "s3"
            && rest
                .first()
                .is_some_and(|sub| ["cp", "sync", "mv"].contains(sub))
        {
            argv.push("--no-progress");
        }
        try_run(
            &self.program,
            &argv,
            &[
                ("AWS_ACCESS_KEY_ID", ACCESS_KEY),
                ("AWS_SECRET_ACCESS_KEY", SECRET_KEY),
                ("AWS_DEFAULT_REGION", "us-east-1"),
                ("AWS_EC2_METADATA_DISABLED", "true"),
                ("AWS_CONFIG_FILE", "/dev/null"),
                ("AWS_SHARED_CREDENTIALS_FILE", "/dev/null"),
                ("AWS_PAGER", ""),
            ],
        )
        .await
    }
}
