//! Human-friendly units for config values: sizes (`512MiB`), durations (`30s`), and
//! listen addresses that may be left empty.
//!
//! Both parse from strings (and sizes also from plain integers of bytes) and print back in
//! the same notation, so the effective config can be logged and re-read unchanged.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// Serializes a value as its `Display` text and deserializes it with `FromStr`; anything
/// but a string (a bare number, most often) is refused with `$expected` as the example.
macro_rules! string_serde {
    ($type:ty, $expected:expr) => {
        impl Serialize for $type {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $type {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct TextVisitor;

                impl Visitor<'_> for TextVisitor {
                    type Value = $type;

                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str($expected)
                    }

                    fn visit_str<E: de::Error>(self, value: &str) -> Result<$type, E> {
                        value.parse().map_err(E::custom)
                    }

                    fn visit_i64<E: de::Error>(self, value: i64) -> Result<$type, E> {
                        Err($crate::config::units::no_unit(value, $expected))
                    }

                    fn visit_u64<E: de::Error>(self, value: u64) -> Result<$type, E> {
                        Err($crate::config::units::no_unit(value, $expected))
                    }

                    fn visit_f64<E: de::Error>(self, value: f64) -> Result<$type, E> {
                        Err($crate::config::units::no_unit(value, $expected))
                    }
                }

                deserializer.deserialize_any(TextVisitor)
            }
        }
    };
}

pub(super) use string_serde;

/// The error for a bare number where a value with a unit is expected.
pub(super) fn no_unit<E: de::Error>(value: impl fmt::Display, expected: &str) -> E {
    E::custom(format!(
        "{value} has no unit (expected a string: {expected})"
    ))
}

/// Resolves a listen address: `IP:port`, `[IPv6]:port`, or `host:port` (a name such as
/// `localhost`, resolved once at start; its first IPv4 address wins).
pub fn resolve_address(text: &str) -> Result<std::net::SocketAddr, String> {
    use std::net::ToSocketAddrs;
    let text = text.trim();
    let hint = || {
        format!(
            "{text:?} is not a listen address (expected host:port, like \"0.0.0.0:8080\", \"127.0.0.1:8080\", \"[::]:8080\" or \"localhost:8080\")"
        )
    };
    if let Ok(address) = text.parse() {
        return Ok(address);
    }
    let resolved: Vec<std::net::SocketAddr> = text.to_socket_addrs().map_err(|_| hint())?.collect();
    resolved
        .iter()
        .find(|address| address.is_ipv4())
        .or_else(|| resolved.first())
        .copied()
        .ok_or_else(hint)
}

/// `deserialize_with` for a listen address given as text (see [`resolve_address`]).
pub fn socket_address<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<std::net::SocketAddr, D::Error> {
    let text = String::deserialize(deserializer)?;
    resolve_address(&text).map_err(de::Error::custom)
}

/// A size in bytes, written as `4MiB`, `10GiB`, `65536` or `64 KiB`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteSize(pub u64);

impl ByteSize {
    pub const fn kib(n: u64) -> Self {
        Self(n * 1024)
    }

    pub const fn mib(n: u64) -> Self {
        Self(n * 1024 * 1024)
    }

    pub const fn gib(n: u64) -> Self {
        Self(n * 1024 * 1024 * 1024)
    }

    pub const fn bytes(self) -> u64 {
        self.0
    }
}

impl FromStr for ByteSize {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        // Only bytes and binary units: "8GB" would be 8,000,000,000 bytes, and "8G" is
        // ambiguous, where an operator almost always means 8 GiB.
        let unit = text
            .trim()
            .trim_start_matches(|c: char| c.is_ascii_digit() || c == '.' || c == ' ')
            .to_ascii_lowercase();
        if !matches!(
            unit.as_str(),
            "" | "b" | "kib" | "mib" | "gib" | "tib" | "pib"
        ) {
            return Err(format!(
                "invalid size {text:?}: use bytes or binary units (KiB, MiB, GiB, TiB), like \"512MiB\" or \"8GiB\"; decimal units (KB, MB, GB) are not accepted"
            ));
        }
        text.trim()
            .parse::<bytesize::ByteSize>()
            .map(|size| Self(size.as_u64()))
            .map_err(|_| {
                format!(
                    "invalid size {text:?} (expected a size like 512MiB, 4GiB or a number of bytes)"
                )
            })
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(&str, u64); 4] = [
            ("TiB", 1 << 40),
            ("GiB", 1 << 30),
            ("MiB", 1 << 20),
            ("KiB", 1 << 10),
        ];
        for (unit, factor) in UNITS {
            if self.0 >= factor && self.0.is_multiple_of(factor) {
                return write!(f, "{}{unit}", self.0 / factor);
            }
        }
        write!(f, "{}B", self.0)
    }
}

impl Serialize for ByteSize {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct SizeVisitor;

        impl Visitor<'_> for SizeVisitor {
            type Value = ByteSize;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size like 512MiB, 4GiB or a number of bytes")
            }

            fn visit_u64<E: de::Error>(self, value: u64) -> Result<ByteSize, E> {
                Ok(ByteSize(value))
            }

            fn visit_i64<E: de::Error>(self, value: i64) -> Result<ByteSize, E> {
                u64::try_from(value)
                    .map(ByteSize)
                    .map_err(|_| E::custom(format!("invalid size {value} (must not be negative)")))
            }

            fn visit_str<E: de::Error>(self, value: &str) -> Result<ByteSize, E> {
                value.parse().map_err(E::custom)
            }
        }

        deserializer.deserialize_any(SizeVisitor)
    }
}

/// A duration written as `30s`, `5m`, `1h 30m` or `250ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct HumanDuration(pub Duration);

impl HumanDuration {
    pub const fn secs(n: u64) -> Self {
        Self(Duration::from_secs(n))
    }

    pub const fn get(self) -> Duration {
        self.0
    }
}

impl FromStr for HumanDuration {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        humantime::parse_duration(text.trim())
            .map(Self)
            .map_err(|_| {
                format!("invalid duration {text:?} (expected a duration like 30s, 5m or 250ms)")
            })
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_zero() {
            return f.write_str("0s");
        }
        write!(f, "{}", humantime::format_duration(self.0))
    }
}

string_serde!(
    HumanDuration,
    "a duration with a unit, like \"30s\", \"5m\" or \"250ms\""
);

/// How long object metadata is trusted before it is revalidated upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetadataTtl {
    /// Revalidate after this long; zero revalidates on every request.
    After(Duration),
    /// Objects never change under a key: metadata is never revalidated.
    Immutable,
}

impl FromStr for MetadataTtl {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text.trim() == "immutable" {
            return Ok(Self::Immutable);
        }
        text.parse::<HumanDuration>()
            .map(|duration| Self::After(duration.get()))
            .map_err(|_| format!("invalid metadata TTL {text:?} (expected a duration like 60s, 0s, or \"immutable\")"))
    }
}

impl fmt::Display for MetadataTtl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::After(duration) => HumanDuration(*duration).fmt(f),
            Self::Immutable => f.write_str("immutable"),
        }
    }
}

string_serde!(
    MetadataTtl,
    "a duration with a unit, like \"60s\" or \"10m\", or \"immutable\""
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_binary_units_and_plain_bytes() {
        assert_eq!("4MiB".parse::<ByteSize>().unwrap(), ByteSize::mib(4));
        assert_eq!("64 KiB".parse::<ByteSize>().unwrap(), ByteSize::kib(64));
        assert_eq!("10GiB".parse::<ByteSize>().unwrap(), ByteSize::gib(10));
        assert_eq!("65536".parse::<ByteSize>().unwrap(), ByteSize(65536));
        assert!("4XB".parse::<ByteSize>().is_err());
        assert!("".parse::<ByteSize>().is_err());
    }

    #[test]
    fn sizes_print_in_the_largest_exact_unit() {
        assert_eq!(ByteSize::mib(4).to_string(), "4MiB");
        assert_eq!(ByteSize::kib(1536).to_string(), "1536KiB");
        assert_eq!(ByteSize(1000).to_string(), "1000B");
        assert_eq!(ByteSize(0).to_string(), "0B");
        for size in [ByteSize::gib(3), ByteSize(12345), ByteSize::kib(64)] {
            assert_eq!(size.to_string().parse::<ByteSize>().unwrap(), size);
        }
    }

    #[test]
    fn durations_round_trip() {
        assert_eq!(
            "30s".parse::<HumanDuration>().unwrap(),
            HumanDuration::secs(30)
        );
        assert_eq!("0s".parse::<HumanDuration>().unwrap().get(), Duration::ZERO);
        assert_eq!(
            "250ms".parse::<HumanDuration>().unwrap().get(),
            Duration::from_millis(250)
        );
        assert!("thirty".parse::<HumanDuration>().is_err());
        let five_minutes = HumanDuration::secs(300);
        assert_eq!(
            five_minutes.to_string().parse::<HumanDuration>().unwrap(),
            five_minutes
        );
    }

    #[test]
    fn metadata_ttl_accepts_immutable() {
        assert_eq!(
            "immutable".parse::<MetadataTtl>().unwrap(),
            MetadataTtl::Immutable
        );
        assert_eq!(
            "0s".parse::<MetadataTtl>().unwrap(),
            MetadataTtl::After(Duration::ZERO)
        );
        assert!("forever".parse::<MetadataTtl>().is_err());
    }
}

/// A listen address, or none (`""`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OptionalAddress(pub Option<std::net::SocketAddr>);

impl FromStr for OptionalAddress {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(Self(None));
        }
        resolve_address(text)
            .map(|address| Self(Some(address)))
            .map_err(|error| format!("{error}, or \"\" for none"))
    }
}

impl fmt::Display for OptionalAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(address) => write!(f, "{address}"),
            None => Ok(()),
        }
    }
}

string_serde!(
    OptionalAddress,
    "an address like \"127.0.0.1:9091\", or \"\" for none"
);
