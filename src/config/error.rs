//! `ConfigError`: what is wrong with the configuration and where, carried in parts. Its
//! `Display` (with `KeyProblem`'s) is the one place a message is worded, so every key's
//! error reads `config key <key>: <problem>` the same way.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

/// A configuration error: one line naming the key (or the file, or the environment
/// variable) and what it accepts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// One key's value, or its relation to other keys; `variable` is the environment
    /// variable that set the key, if one did.
    #[error("config key {key}{}: {problem}", Aside("environment variable ", .variable))]
    Key {
        key: String,
        variable: Option<String>,
        problem: KeyProblem,
    },
    /// Keys that are set together, or only one of them.
    #[error("config keys {}: {requirement}", KeyList(.keys))]
    Keys {
        keys: Vec<String>,
        requirement: String,
    },
    /// The configuration file cannot be read or is not TOML; `line` is where the parser
    /// stopped.
    #[error("config file {}{}: {detail}", .path.display(), Aside("line ", .line))]
    File {
        path: PathBuf,
        line: Option<usize>,
        detail: String,
    },
    /// A `PORTICO_<SECTION>_<KEY>` variable names a key its section does not have.
    #[error("environment variable {variable}: [{section}] has no key {key:?} (keys: {})", .known.join(", "))]
    UnknownVariable {
        variable: String,
        section: String,
        key: String,
        known: Vec<String>,
    },
    /// A `PORTICO_*` variable's value is not of its key's type.
    #[error("environment variable {variable}={value:?} (config key {key}): expected {expected}")]
    MistypedVariable {
        variable: String,
        value: String,
        key: String,
        expected: &'static str,
    },
    /// The defaults do not serialise to TOML (a defect, not a user's mistake).
    #[error("config defaults are not representable as TOML")]
    DefaultsNotToml,
}

/// What is wrong with one key: each variant is one phrasing, shared by every key it fits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyProblem {
    /// `<value> is not accepted (expected <expected>)`.
    NotAccepted { value: String, expected: String },
    /// `<value> is too small (expected <expected>)`.
    TooSmall { value: String, expected: String },
    /// `must be at least <minimum>`, then ` (<hint>)`.
    MustBeAtLeast {
        minimum: String,
        hint: Option<String>,
    },
    /// `must be longer than 0s`, then ` (<hint>)`.
    MustBeLongerThanZero { hint: Option<String> },
    /// `must be set when <condition>`, then ` (<hint>)`.
    MustBeSetWhen {
        condition: String,
        hint: Option<String>,
    },
    /// `set only with <other_key>`.
    SetOnlyWith { other_key: String },
    /// A phrasing no other key shares, or a parser's own words.
    Detail(String),
}

impl fmt::Display for KeyProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotAccepted { value, expected } => {
                write!(f, "{value} is not accepted (expected {expected})")
            }
            Self::TooSmall { value, expected } => {
                write!(f, "{value} is too small (expected {expected})")
            }
            Self::MustBeAtLeast { minimum, hint } => {
                write!(f, "must be at least {minimum}{}", Aside("", hint))
            }
            Self::MustBeLongerThanZero { hint } => {
                write!(f, "must be longer than 0s{}", Aside("", hint))
            }
            Self::MustBeSetWhen { condition, hint } => {
                write!(f, "must be set when {condition}{}", Aside("", hint))
            }
            Self::SetOnlyWith { other_key } => write!(f, "set only with {other_key}"),
            Self::Detail(detail) => f.write_str(detail),
        }
    }
}

impl ConfigError {
    /// `config key <key>: <value> is not accepted (expected <expected>)`.
    pub(super) fn not_accepted(
        key: impl Into<String>,
        value: impl fmt::Display,
        expected: impl fmt::Display,
    ) -> Self {
        Self::key(
            key,
            KeyProblem::NotAccepted {
                value: value.to_string(),
                expected: expected.to_string(),
            },
        )
    }

    /// `config key <key>: <value> is too small (expected <expected>)`.
    pub(super) fn too_small(
        key: impl Into<String>,
        value: impl fmt::Display,
        expected: impl fmt::Display,
    ) -> Self {
        Self::key(
            key,
            KeyProblem::TooSmall {
                value: value.to_string(),
                expected: expected.to_string(),
            },
        )
    }

    /// `config key <key>: must be at least <minimum> (<hint>)`.
    pub(super) fn must_be_at_least(
        key: impl Into<String>,
        minimum: impl fmt::Display,
        hint: Option<&str>,
    ) -> Self {
        Self::key(
            key,
            KeyProblem::MustBeAtLeast {
                minimum: minimum.to_string(),
                hint: hint.map(str::to_owned),
            },
        )
    }

    /// `config key <key>: must be longer than 0s (<hint>)`.
    pub(super) fn must_be_longer_than_zero(key: impl Into<String>, hint: Option<&str>) -> Self {
        Self::key(
            key,
            KeyProblem::MustBeLongerThanZero {
                hint: hint.map(str::to_owned),
            },
        )
    }

    /// `config key <key>: must be set when <condition> (<hint>)`.
    pub(super) fn must_be_set_when(
        key: impl Into<String>,
        condition: impl fmt::Display,
        hint: Option<&str>,
    ) -> Self {
        Self::key(
            key,
            KeyProblem::MustBeSetWhen {
                condition: condition.to_string(),
                hint: hint.map(str::to_owned),
            },
        )
    }

    /// `config key <key>: set only with <other_key>`.
    pub(super) fn set_only_with(key: impl Into<String>, other_key: impl Into<String>) -> Self {
        Self::key(
            key,
            KeyProblem::SetOnlyWith {
                other_key: other_key.into(),
            },
        )
    }

    /// `config key <key>: <detail>`.
    pub(super) fn with_detail(key: impl Into<String>, detail: impl fmt::Display) -> Self {
        Self::key(key, KeyProblem::Detail(detail.to_string()))
    }

    /// `config keys <a>, <b> and <c>: <requirement>`.
    pub(super) fn keys(
        keys: impl IntoIterator<Item = impl Into<String>>,
        requirement: impl Into<String>,
    ) -> Self {
        Self::Keys {
            keys: keys.into_iter().map(Into::into).collect(),
            requirement: requirement.into(),
        }
    }

    fn key(key: impl Into<String>, problem: KeyProblem) -> Self {
        Self::Key {
            key: key.into(),
            variable: None,
            problem,
        }
    }

    /// This error, naming the environment variable that set its key, if `set_by` (key →
    /// variable) has the key itself.
    pub(super) fn naming_variable(self, set_by: &BTreeMap<String, String>) -> Self {
        match self {
            Self::Key {
                key,
                variable: None,
                problem,
            } => {
                let variable = set_by.get(&key).cloned();
                Self::Key {
                    key,
                    variable,
                    problem,
                }
            }
            other => other,
        }
    }
}

/// ` (<label><text>)`, or nothing when there is no text.
struct Aside<'a, T>(&'static str, &'a Option<T>);

impl<T: fmt::Display> fmt::Display for Aside<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.1 {
            Some(text) => write!(f, " ({}{text})", self.0),
            None => Ok(()),
        }
    }
}

/// `a`, `a and b`, `a, b and c`.
struct KeyList<'a>(&'a [String]);

impl fmt::Display for KeyList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some((last, rest)) = self.0.split_last() else {
            return Ok(());
        };
        for (index, key) in rest.iter().enumerate() {
            if index > 0 {
                f.write_str(", ")?;
            }
            f.write_str(key)?;
        }
        if !rest.is_empty() {
            f.write_str(" and ")?;
        }
        f.write_str(last)
    }
}
