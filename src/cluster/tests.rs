use super::*;
use crate::config::HumanDuration;
use crate::source::Peers;
use crate::types::ObjectRef;

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
        None,
        Arc::new(Metrics::new()),
        Shutdown::never(),
        Tasks::new(),
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
    let cluster = Cluster::start(
        &config(&members, ""),
        None,
        metrics.clone(),
        Shutdown::never(),
        Tasks::new(),
    )
    .await;
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

#[tokio::test]
async fn with_a_zone_blocks_are_owned_within_it_and_unknown_zones_own_nothing() {
    let members = [
        "127.0.0.1:9100",
        "127.0.0.1:9101",
        "127.0.0.1:9102",
        "127.0.0.1:9103",
    ];
    let zoned = ClusterConfig {
        zone: "a".to_owned(),
        ..config(&members, "")
    };
    let cluster = Cluster::start(
        &zoned,
        None,
        Arc::new(Metrics::new()),
        Shutdown::never(),
        Tasks::new(),
    )
    .await;
    let object = ObjectRef::new("bucket", "key").unwrap();
    let owners = |cluster: &Cluster| -> Vec<Option<PeerId>> {
        (0..64)
            .map(|index| cluster.owner(&object, 1 << 22, index))
            .collect()
    };
    // No other member's zone is known yet: this node, alone in zone a, owns everything.
    assert!(owners(&cluster).iter().all(Option::is_none));
    let learn = |member: &str, zone: &str| {
        cluster
            .zones
            .write()
            .insert(peer_id(member), Arc::from(zone));
    };
    learn("127.0.0.1:9101", "a");
    learn("127.0.0.1:9102", "b");
    learn("127.0.0.1:9103", "b");
    let within: Vec<Option<PeerId>> = owners(&cluster);
    let theirs: Vec<&PeerId> = within.iter().flatten().collect();
    assert!(
        !theirs.is_empty(),
        "the other member of zone a owns a share"
    );
    assert!(
        theirs.iter().all(|owner| ***owner == *"127.0.0.1:9101"),
        "{theirs:?}"
    );
    // The zone-mate fails: its blocks come back to this node, never to zone b.
    let error = PeerError::Failed {
        peer: peer_id("127.0.0.1:9101"),
        reason: "down".to_owned(),
    };
    cluster.suspect(&peer_id("127.0.0.1:9101"), &error);
    assert!(owners(&cluster).iter().all(Option::is_none));
    // Without a zone, the whole ring owns.
    let plain = Cluster::start(
        &config(&members, ""),
        None,
        Arc::new(Metrics::new()),
        Shutdown::never(),
        Tasks::new(),
    )
    .await;
    let spread: Vec<Option<PeerId>> = owners(&plain);
    assert!(
        spread
            .iter()
            .flatten()
            .any(|owner| **owner == *"127.0.0.1:9102")
    );
}
