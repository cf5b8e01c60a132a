use super::*;
use crate::config::HumanDuration;

fn config(members: &[&str], dns: &str) -> ClusterConfig {
    ClusterConfig {
        enabled: true,
        listen: "127.0.0.1:9100".parse().unwrap(),
        members: members.iter().map(|member| member.to_string()).collect(),
        members_dns: dns.to_owned(),
        secret: "sixteen-bytes-or-more".to_owned(),
        suspect_for: HumanDuration::secs(60),
        ..ClusterConfig::default()
    }
}

#[tokio::test]
async fn members_come_from_a_dns_name_with_its_port() {
    let cluster = Cluster::start(
        &config(&[], "localhost:9100"),
        Arc::new(Metrics::new()),
        Shutdown::never(),
    )
    .await;
    let ring = cluster.ring();
    assert!(
        ring.members()
            .iter()
            .any(|member| &**member == "127.0.0.1:9100"),
        "{:?}",
        ring.members()
    );
}

#[tokio::test]
async fn a_suspect_member_hands_its_blocks_to_the_next_and_this_node_owns_its_own() {
    let members = ["127.0.0.1:9100", "127.0.0.1:9101", "127.0.0.1:9102"];
    let metrics = Arc::new(Metrics::new());
    let cluster = Cluster::start(&config(&members, ""), metrics.clone(), Shutdown::never()).await;
    assert_eq!(metrics.cluster_members.get(), 3);
    let object = ObjectRef::new("bucket", "key").unwrap();
    let ranked = |index| -> Vec<PeerId> {
        cluster
            .ring()
            .ranked(&object, 1 << 22, index)
            .cloned()
            .collect()
    };
    // A block whose best owner is another member, and one that is this node's.
    let theirs = (0..100)
        .find(|&index| *ranked(index)[0] != *"127.0.0.1:9100")
        .unwrap();
    let ours = (0..100)
        .find(|&index| *ranked(index)[0] == *"127.0.0.1:9100")
        .unwrap();
    assert_eq!(cluster.owner(&object, 1 << 22, ours), None);
    let owner = cluster.owner(&object, 1 << 22, theirs).unwrap();
    assert_eq!(owner, ranked(theirs)[0]);

    let error = PeerError::Failed {
        peer: owner.clone(),
        reason: "refused".to_owned(),
    };
    cluster.suspect(&owner, &error);
    assert!(cluster.is_suspect(&owner));
    let next = ranked(theirs)[1].clone();
    let expected = (*next != *"127.0.0.1:9100").then_some(next);
    assert_eq!(cluster.owner(&object, 1 << 22, theirs), expected);
}
