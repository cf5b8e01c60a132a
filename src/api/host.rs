//! Virtual-host style addressing: `Host: <bucket>.<domain>[:port]` for the configured
//! domains; every other host (IP addresses, `localhost`, unknown names) is path style.

use s3s::S3Result;
use s3s::host::{S3Host, VirtualHost};

#[derive(Debug, Clone)]
pub struct VirtualHosts {
    /// Lower-case base domains, longest first so a more specific domain wins.
    domains: Vec<String>,
}

impl VirtualHosts {
    pub fn new(domains: &[String]) -> Self {
        let mut domains: Vec<String> = domains
            .iter()
            .map(|domain| domain.to_ascii_lowercase())
            .collect();
        domains.sort_by_key(|domain| std::cmp::Reverse(domain.len()));
        Self { domains }
    }
}

fn strip_port(host: &str) -> &str {
    match host.rsplit_once(':') {
        Some((name, port))
            if !name.ends_with(']') && port.bytes().all(|byte| byte.is_ascii_digit()) =>
        {
            name
        }
        _ => host,
    }
}

impl S3Host for VirtualHosts {
    fn parse_host_header<'a>(&'a self, host: &'a str) -> S3Result<VirtualHost<'a>> {
        let name = strip_port(host);
        for domain in &self.domains {
            if name.eq_ignore_ascii_case(domain) {
                return Ok(VirtualHost::new(domain.as_str()));
            }
            let suffix_start = name.len().saturating_sub(domain.len() + 1);
            if name.len() > domain.len() + 1
                && name.as_bytes()[suffix_start] == b'.'
                && name[suffix_start + 1..].eq_ignore_ascii_case(domain)
            {
                return Ok(VirtualHost::new(domain.as_str()).with_bucket(&name[..suffix_start]));
            }
        }
        Ok(VirtualHost::new(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket_of(hosts: &VirtualHosts, host: &str) -> Option<String> {
        hosts
            .parse_host_header(host)
            .unwrap()
            .bucket()
            .map(str::to_owned)
    }

    #[test]
    fn buckets_come_from_subdomains_of_configured_domains() {
        let hosts = VirtualHosts::new(&["s3.local".to_owned(), "cache.example.com".to_owned()]);
        assert_eq!(bucket_of(&hosts, "photos.s3.local"), Some("photos".into()));
        assert_eq!(
            bucket_of(&hosts, "photos.s3.local:8080"),
            Some("photos".into())
        );
        assert_eq!(
            bucket_of(&hosts, "my.dotted.bucket.s3.local"),
            Some("my.dotted.bucket".into())
        );
        assert_eq!(
            bucket_of(&hosts, "logs.CACHE.example.com"),
            Some("logs".into())
        );
        assert_eq!(bucket_of(&hosts, "s3.local:8080"), None);
        assert_eq!(bucket_of(&hosts, "xs3.local"), None);
    }

    #[test]
    fn other_hosts_are_path_style() {
        let hosts = VirtualHosts::new(&["s3.local".to_owned()]);
        assert_eq!(bucket_of(&hosts, "localhost:8080"), None);
        assert_eq!(bucket_of(&hosts, "127.0.0.1:8080"), None);
        assert_eq!(bucket_of(&hosts, "[::1]:8080"), None);
        assert_eq!(bucket_of(&hosts, "portico.svc.cluster.local"), None);
    }
}
